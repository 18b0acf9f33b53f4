"""The live policy without workers: versions stored on memory and a real Redis, the watch on an
injected clock (one read a second at most, a bad version refused and the good one kept), and
bookings made under one policy still valid under the next (same storage, same keys)."""

from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner

from mailer import Limiter, ManualClock, Policy
from mailer.errors import BackendUnavailable
from mailer.factory import check_same_keys
from mailer.records.policy import (
    LivePolicies,
    LivePolicy,
    MemoryPolicyStore,
    PolicyWatch,
    policies_from_url,
)
from mailer.settings import Settings
from workers.cli import main


class CountingStore(MemoryPolicyStore):
    """A memory store that counts the reads of the version (the one read a second), and can be
    made to fail as Redis down does."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.down = False

    def version(self) -> int:
        self.reads += 1
        if self.down:
            raise BackendUnavailable("redis://ledger", ConnectionError("refused"), backend="ledger")
        return super().version()


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def policies(request: pytest.FixtureRequest) -> LivePolicies:
    url = "memory://" if request.param == "memory" else str(request.getfixturevalue("redis_url"))
    return policies_from_url(url, clock=ManualClock(5000.0))


def test_versions_are_stored_numbered_and_listed(policies: LivePolicies) -> None:
    """None stored: version 0; each set is the next version, in force, with its time."""
    assert (policies.version(), policies.current()) == (0, None)
    first = policies.set(LivePolicy("1/60s, 5/1h"))
    second = policies.set(LivePolicy("recipient: 1/1h; sender: 5/1s", {"code": {"share": "0.5"}}))
    assert (first.version, second.version, policies.version()) == (1, 2, 2)
    assert policies.current() == second and second.set_at == 5000.0
    assert [p.version for p in policies.history() if isinstance(p, LivePolicy)] == [1, 2]
    assert second.describe() == "recipient: 1/1h; sender: 5/1s; code share=0.5"


def test_a_version_applies_its_policy_and_kinds_to_the_settings() -> None:
    """The policy and the kinds' tolerance and share change; everything else stays."""
    env = Settings(sender="orders@example.org")
    live = LivePolicy("recipient: 1/1h; sender: 2/1s", {"code": {"max_wait": "2m", "share": "0.5"}})
    applied = live.apply(env)
    assert str(applied.policy) == "recipient: 1/1h; sender: 2/1s"
    assert (applied.kinds["code"].max_wait, applied.kinds["code"].share) == (120.0, 0.5)
    assert applied.kinds["code"].priority == env.kinds["code"].priority
    assert applied.sender == env.sender and applied.kinds["default"] == env.kinds["default"]


@pytest.mark.parametrize(
    ("live", "error"),
    [
        (LivePolicy("1/0s"), r"policy '1/0s': "),
        (LivePolicy("fast please"), r"policy 'fast please': "),
        (LivePolicy("1/1h", {"nope": {"max_wait": "1m"}}), r"unknown kind 'nope'"),
        (LivePolicy("1/1h", {"code": {"priority": "1"}}), r"'priority' is not one of"),
        (LivePolicy("1/1h", {"code": {"max_wait": "soon"}}), r"MAX_WAIT"),
        (LivePolicy("1/1h", {"code": {"share": "2"}}), r"share must be"),
    ],
)
def test_a_bad_version_is_refused_in_one_line(live: LivePolicy, error: str) -> None:
    with pytest.raises(ValueError, match=error) as caught:
        live.apply(Settings())
    assert "\n" not in str(caught.value)


def _watch(store: CountingStore, clock: ManualClock) -> PolicyWatch[Settings]:
    env = Settings()

    def build(live: LivePolicy | None) -> Settings:
        return env if live is None else live.apply(env)

    return PolicyWatch(LivePolicies(store, clock=clock), build, clock=clock)


def test_the_watch_reads_the_version_at_most_once_a_second() -> None:
    """A new version is built at the first check a second after the last read; checks in
    between read nothing."""
    clock, store = ManualClock(100.0), CountingStore()
    watch = _watch(store, clock)
    assert watch.check() is None and store.reads == 1, "none stored: the environment's holds"
    LivePolicies(store).set(LivePolicy("1/1h"))
    for _ in range(50):
        clock.advance(0.01)
        assert watch.check() is None
    assert store.reads == 1, "no read within the second"
    clock.advance(0.5)
    built = watch.check()
    assert built is not None and str(built.policy) == "1/1h" and watch.version == 1
    assert store.reads == 2
    clock.advance(1.0)
    assert watch.check() is None and store.reads == 3, "no change: nothing built"


def test_a_bad_version_is_refused_loudly_and_the_last_good_one_stays(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Version 2 does not parse, version 3 cannot be read as a policy: both refused, logged
    once each, version 1 stays; version 4 is taken."""
    clock, store = ManualClock(100.0), CountingStore()
    watch = _watch(store, clock)
    policies = LivePolicies(store)
    policies.set(LivePolicy("1/1h"))
    assert watch.check() is not None
    policies.set(LivePolicy("1/0s"))
    with caplog.at_level(logging.ERROR, logger="mailguard"):
        for _ in range(3):
            clock.advance(1.0)
            assert watch.check() is None
        store.put('{"kinds": {}}')
        clock.advance(1.0)
        assert watch.check() is None
    refusals = [r.getMessage() for r in caplog.records if "REFUSED" in r.getMessage()]
    assert len(refusals) == 2, refusals
    assert refusals[0].startswith("LIVE POLICY VERSION 2 REFUSED, version 1 stays in force: ")
    assert "version 3 REFUSED".upper() in refusals[1].upper() and "not a policy" in refusals[1]
    assert watch.version == 1
    policies.set(LivePolicy("2/1h"))
    clock.advance(1.0)
    built = watch.check()
    assert built is not None and str(built.policy) == "2/1h" and watch.version == 4


def test_redis_down_keeps_the_version_in_force_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, store = ManualClock(100.0), CountingStore()
    watch = _watch(store, clock)
    LivePolicies(store).set(LivePolicy("1/1h"))
    assert watch.check() is not None
    store.down = True
    with caplog.at_level(logging.WARNING, logger="mailguard"):
        for _ in range(3):
            clock.advance(1.0)
            assert watch.check() is None
    assert sum("unreadable" in r.getMessage() for r in caplog.records) == 1
    store.down = False
    LivePolicies(store).set(LivePolicy("3/1h"))
    clock.advance(1.0)
    assert watch.check() is not None and watch.version == 2


def test_a_removed_live_policy_gives_the_environments_back() -> None:
    clock, store = ManualClock(100.0), CountingStore()
    watch = _watch(store, clock)
    LivePolicies(store).set(LivePolicy("1/1h"))
    assert watch.check() is not None
    store._values.clear()  # what a flushed Redis leaves
    clock.advance(1.0)
    built = watch.check()
    assert built is not None and built.policy == Settings().policy and watch.version == 0


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("1/1h", "1/2h, 5/1d"),
        ("recipient: 1/1h; sender: 100/1s", "recipient: 1/2h; domain: 50/1s"),
        ("recipient: 1/1h; sender: 100/1s", "recipient: 1/1h, 5/1d; tenant: 10/1s"),
    ],
)
def test_a_booking_made_under_one_policy_stays_valid_under_the_next(
    redis_url: str, before: str, after: str
) -> None:
    """On one Redis: m1 admitted and m2 booked under ``before``; a limiter for ``after`` on the
    same storage gives m2 its same slot, consuming nothing more, and counts m1 and m2 for the
    next mail."""
    clock = ManualClock(1_000_000.0)
    old = Limiter.from_url(
        redis_url, Policy.parse(before, name="recipient"), secret="s", clock=clock
    )
    assert old.acquire("ada@example.com", mail_id="m1", max_wait=7200).allowed
    booked = old.acquire("ada@example.com", mail_id="m2", max_wait=7200)
    assert booked.booked and booked.wait == 3600
    new = Limiter.from_url(
        redis_url, Policy.parse(after, name="recipient"), secret="s", clock=clock
    )
    check_same_keys(old, new)
    again = new.acquire("ada@example.com", mail_id="m2", max_wait=7200)
    assert (again.booked, again.at_ms) == (True, booked.at_ms), "the same slot"
    third = new.acquire("ada@example.com", mail_id="m3", max_wait=86400)
    assert third.booked and third.at_ms > booked.at_ms, "m1 and m2 still count"
    old.close()
    new.close()


@pytest.mark.parametrize(
    ("before", "after"),
    [("1/1h", "recipient: 1/1h; sender: 100/1s"), ("recipient: 1/1h; sender: 9/1s", "1/1h")],
)
def test_a_change_that_would_forget_the_counts_is_refused(before: str, after: str) -> None:
    """A recipient-only policy and a scoped one keep a recipient under other keys: refused."""
    old = Limiter.from_url("memory://", Policy.parse(before, name="recipient"))
    new = Limiter.from_url("memory://", Policy.parse(after, name="recipient"))
    with pytest.raises(ValueError, match="keeps the recipient scope under other keys"):
        check_same_keys(old, new)


def _cli_env(redis_url: str) -> dict[str, str]:
    return {
        "MAILGUARD_LIMITER_URL": redis_url,
        "MAILGUARD_SECRET": "s",
        "MAILGUARD_POLICY": "1/60s, 5/1h",
    }


def test_policy_set_shows_the_comparison_and_asks(redis_url: str) -> None:
    """Without --yes: the candidate against the version in force on a generated day, then a
    question; no stores nothing, yes stores version 1; show, history and simulate --against
    current read it."""
    env, runner = _cli_env(redis_url), CliRunner()
    shown = runner.invoke(main, ["policy", "show"], env=env)
    assert shown.exit_code == 0 and "version 0 (none stored)" in shown.output
    assert "1/1m, 5/1h" in shown.output
    declined = runner.invoke(main, ["policy", "set", "1/2m, 4/1h"], env=env, input="n\n")
    assert declined.exit_code == 1 and "A: 1/2m, 4/1h" in declined.output
    assert "B: 1/1m, 5/1h" in declined.output and "not stored" in declined.output
    assert runner.invoke(main, ["policy", "history"], env=env).output.startswith("no live policy")
    agreed = runner.invoke(
        main, ["policy", "set", "1/2m, 4/1h", "--max-wait", "code=2m"], env=env, input="y\n"
    )
    assert agreed.exit_code == 0, agreed.output
    assert "policy version 1 stored: 1/2m, 4/1h; code max_wait=2m" in agreed.output
    shown = runner.invoke(main, ["policy", "show"], env=env)
    assert "version 1, set " in shown.output and "code: max_wait 2m" in shown.output
    history = runner.invoke(main, ["policy", "history", "--json"], env=env)
    assert [v["policy"] for v in json.loads(history.output)] == ["1/2m, 4/1h"]
    compared = runner.invoke(main, ["simulate", "--against", "current", "--hours", "1"], env=env)
    assert compared.exit_code == 0 and "B: 1/2m, 4/1h" in compared.output, compared.output


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["1/0s"], "policy set: policy '1/0s': "),
        (["1/1h", "--max-wait", "nope=1m"], "policy set: unknown kind 'nope'"),
        (["1/1h", "--share", "code"], "--share 'code': expected KIND=VALUE"),
        (["recipient: 1/1h; sender: 5/1s"], "keeps the recipient scope under other keys"),
    ],
)
def test_policy_set_refuses_before_storing_in_one_line(
    redis_url: str, args: list[str], error: str
) -> None:
    env = _cli_env(redis_url)
    refused = CliRunner().invoke(main, ["policy", "set", *args, "--yes"], env=env)
    assert refused.exit_code == 2 and refused.output.count("\n") == 1, refused.output
    assert error in refused.output
    shown = CliRunner().invoke(main, ["policy", "show", "--json"], env=env)
    assert json.loads(shown.output)["version"] == 0, "nothing stored"


def test_a_memory_ledger_has_no_live_policy() -> None:
    refused = CliRunner().invoke(main, ["policy", "show"], env={"MAILGUARD_LIMITER_URL": ""})
    assert refused.exit_code == 1 and "live policy" in refused.output


def test_status_shows_the_budget_under_the_live_policy(redis_url: str) -> None:
    """``mailguard status`` reads the policy the workers decide by: the stored version, not the
    environment's MAILGUARD_POLICY (which it shows while none is stored)."""
    env, runner = _cli_env(redis_url), CliRunner()
    before = runner.invoke(main, ["status", "ada@example.com"], env=env)
    assert before.exit_code == 0 and "1/1m, 5/1h" in before.output, before.output
    stored = runner.invoke(main, ["policy", "set", "1/2m, 4/1h", "--yes"], env=env)
    assert stored.exit_code == 0, stored.output
    after = runner.invoke(main, ["status", "ada@example.com"], env=env)
    assert after.exit_code == 0 and "1/2m, 4/1h" in after.output, after.output
    assert "1/1m" not in after.output
