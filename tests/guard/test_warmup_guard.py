"""Warm-up plans in the guard, in this process with the memory limiter, ledger and transport
and the limiter's clock moved by the test (never slept through): a sender on a plan sends day
1's allowance and parks the rest for day 2 in the order they came, a login code is not
starved, a mail past its kind's deadline ends expired, an idle sender starts over."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mailer import Kind, Kinds, Limiter, ManualClock, Policy
from mailer.factory import build_guard, memory_guard
from mailer.guard import Finish, Guard, Later, MailRequest, Progress, Step
from mailer.mail.kinds import BUILTIN_KINDS
from mailer.mail.transports import MemoryTransport
from mailer.metrics import NO_METRICS
from mailer.records.ledger import MemoryLedger
from mailer.records.warmup import DAY, Warmup, parse_plans, warmup_from_url
from mailer.settings import Settings
from tests.round_trips import round_trips

SENDER = "News <news@example.org>"
KINDS = Kinds([*BUILTIN_KINDS, Kind("newsletter", max_wait=3 * DAY), Kind("digest", max_wait=3600)])


def _guard(clock: ManualClock, plans: str = "example.org: 3, 5") -> tuple[Guard, Warmup]:
    limiter = Limiter.from_url("memory://", Policy.parse("1000/1s", name="recipient"), clock=clock)
    warmup = warmup_from_url("memory://", parse_plans(plans), clock=limiter.now)
    guard = memory_guard(
        limiter, MemoryLedger(clock), MemoryTransport(), kinds=KINDS, clock=clock,
        metrics=NO_METRICS, warmup=warmup,
    )  # fmt: skip
    return guard, warmup


def _mail(n: int, kind: str = "newsletter") -> MailRequest:
    return MailRequest(
        to=f"r{n}@example.com", mail_id=f"m{n}", kind=kind, subject="s", body="b", from_email=SENDER
    )


def _sent(step: Step) -> bool:
    return isinstance(step, Finish) and step.outcome.status == "sent"


def test_day_one_sends_its_allowance_and_parks_the_rest_for_day_two_in_order() -> None:
    """Seven newsletters on a 3, 5 plan: three sent, four deferred (reason warmup) to day 2's
    start, in the order they came; on day 2 they run in that order and are sent; the plan then
    shows 4 of 5 used."""
    clock = ManualClock(1_700_000_000.0)
    guard, warmup = _guard(clock)
    steps = []
    for n in range(7):
        steps.append(guard.process(_mail(n)))
        clock.advance(1.0)
    assert [_sent(s) for s in steps] == [True] * 3 + [False] * 4
    parked = [s for s in steps if isinstance(s, Later)]
    assert len(parked) == 4 and all(s.outcome.reason == "warmup" for s in parked)
    dues = [s.outcome.due or 0.0 for s in parked]
    assert dues == sorted(dues) and len(set(dues)) == 4
    assert dues[0] >= 1_700_000_000.0 + DAY
    assert "warm-up day 1: 3 of 3 mails used" in (parked[0].outcome.detail or "")
    for n, later in zip(range(3, 7), parked, strict=True):
        clock.set(later.outcome.due or 0.0)
        assert _sent(guard.process(_mail(n), later.progress)), n
    standing = warmup.standing("example.org")
    assert (standing.day, standing.allowance, standing.used, standing.waiting) == (2, 5, 4, 0)


def test_a_login_code_is_not_starved_by_the_plan() -> None:
    """The day's allowance used by newsletters: a ``code`` (transactional) mail is still sent,
    and the next newsletter waits."""
    clock = ManualClock(1_700_000_000.0)
    guard, warmup = _guard(clock)
    assert all(_sent(guard.process(_mail(n))) for n in range(3))
    assert _sent(guard.process(_mail(10, kind="code")))
    assert _sent(guard.process(_mail(11, kind="code")))
    waits = guard.process(_mail(12))
    assert isinstance(waits, Later) and waits.outcome.reason == "warmup"
    assert warmup.standing("example.org").used == 5


def test_a_wait_past_the_kinds_deadline_ends_expired_not_sent() -> None:
    """A ``digest`` mail (max_wait 1 h) over the allowance waits for day 2, whose start is
    past its deadline: its next run ends it expired (never sent, never lost silently), without
    spending day 2's allowance."""
    clock = ManualClock(1_700_000_000.0)
    guard, warmup = _guard(clock, "example.org: 1")
    assert _sent(guard.process(_mail(0, kind="digest")))
    clock.advance(10.0)
    later = guard.process(_mail(1, kind="digest"))
    assert isinstance(later, Later) and later.outcome.reason == "warmup"
    clock.set(later.outcome.due or 0.0)
    ended = guard.process(_mail(1, kind="digest"), later.progress)
    assert isinstance(ended, Finish) and ended.outcome.status == "dropped"
    assert ended.outcome.reason == "expired"
    assert warmup.standing("example.org").used == 0  # day 2's allowance not spent on it


def test_a_sender_without_a_plan_and_a_rerun_are_not_held() -> None:
    """Another domain's mails pass the plan; a mail of the plan run again (a repeat) is not
    counted twice."""
    clock = ManualClock(1_700_000_000.0)
    guard, warmup = _guard(clock, "example.org: 1")
    other = MailRequest(to="r@example.com", mail_id="o1", subject="s", body="b",
                        from_email="orders@elsewhere.org")  # fmt: skip
    assert _sent(guard.process(other)) and _sent(guard.process(_mail(0)))
    guard.process(_mail(0), Progress())
    assert warmup.standing("example.org").used == 1


def test_an_idle_sender_starts_over_on_day_one() -> None:
    """Day 2 of a 1, 2 plan, then 30 days idle: day 1 again, one mail sent, the next parked."""
    clock = ManualClock(1_700_000_000.0)
    guard, warmup = _guard(clock, "example.org: 1, 2")
    assert _sent(guard.process(_mail(0)))
    clock.advance(DAY)
    assert _sent(guard.process(_mail(1))) and _sent(guard.process(_mail(2)))
    assert warmup.standing("example.org").day == 2
    clock.advance(30 * DAY)
    assert _sent(guard.process(_mail(3)))
    assert isinstance(guard.process(_mail(4)), Later)
    standing = warmup.standing("example.org")
    assert (standing.day, standing.used, standing.waiting) == (1, 1, 1)


def test_on_redis_a_plan_costs_one_script_call_and_one_round_trip(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same newsletter through two guards on one Redis, plans off then on: with the plan, one
    more round trip (the count's ``EVALSHA``) and no other; the suppression and reputation
    reads still ride together. Each guard sends one mail first."""
    trips = []
    for plans in ("off", "example.org: 1000"):
        env = {
            "MAILGUARD_SECRET": "test-secret",
            "MAILGUARD_SENDER": SENDER,
            "MAILGUARD_POLICY": "1000/1s",
            "MAILGUARD_SMTP_URL": "memory://",
            "MAILGUARD_LIMITER_URL": redis_url,
            "MAILGUARD_KIND_NEWSLETTER_UNSUBSCRIBE": "1",
            "MAILGUARD_UNSUBSCRIBE_URL": "https://example.org/unsubscribe",
            "MAILGUARD_REPUTATION": "on",
            "MAILGUARD_WARMUP": plans,
        }
        guard = build_guard(Settings.from_env(env), metrics=NO_METRICS)
        ids = iter(range(100))

        def run(guard: Guard = guard, ids: Iterator[int] = ids, base: str = plans) -> Step:
            n = next(ids)
            request = MailRequest(to=f"r{n}@example.com", mail_id=f"{base}-{n}",
                                  kind="newsletter", subject="s", body="b")  # fmt: skip
            return guard.process(request)

        assert _sent(run())
        count, step = round_trips(monkeypatch, run)
        assert _sent(step)
        trips.append(count)
    assert trips[1] == trips[0] + 1, trips
