"""The guard's round trips on one Redis (limiter and ledger on one URL, reference policy):
one before sending (the claim, the gates' reads and the decision, one script call), one after
(the record). Counted on a real server with ``INFO commandstats`` (calls inside scripts
included) and at the client (writes to a connection): counts do not depend on the machine.

And the ride changes no answer: the decision is made in the claim's script only when it is the
one the admission would ask for (claim taken, not a first run's copy, no suppression or hold);
otherwise the run asks the limiter as it always did, and the outcome is the same.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from devservers.redis_servers import RedisClusterServers
from mailer.factory import build_guard
from mailer.guard import Finish, Guard, Later, MailRequest, Progress
from mailer.limits.policy import REFERENCE_POLICY
from mailer.metrics import NO_METRICS
from mailer.records.ledger import RedisLedger
from mailer.records.ledger.redis import BEGIN_SCRIPT
from mailer.records.ledger.ride import compose
from mailer.settings import Settings
from tests.round_trips import round_trips

_ids = itertools.count()


def _settings(redis_url: str, **extra: str) -> Settings:
    env = {
        "MAILGUARD_LIMITER_URL": redis_url,
        "MAILGUARD_SECRET": "s",
        "MAILGUARD_SMTP_URL": "memory://",
        "MAILGUARD_POLICY": REFERENCE_POLICY,
        **extra,
    }
    return Settings.from_env(env)


@pytest.fixture
def guard(redis_url: str) -> Iterator[Guard]:
    built = build_guard(_settings(redis_url), metrics=NO_METRICS)
    yield built
    built.limiter.close()


def _mail(to: str | None = None, mail_id: str | None = None) -> MailRequest:
    n = next(_ids)
    to = to or f"r{n}@example.com"
    return MailRequest(to=to, mail_id=mail_id or f"m{n}", subject="s", body="b")


def _calls(client: redis.Redis) -> dict[str, int]:
    """Commands run since the last CONFIG RESETSTAT, the test's own left out."""
    stats = client.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    return {name: n for name, n in calls.items() if name not in {"config|resetstat", "hello"}}


def test_a_sent_mail_costs_two_round_trips_and_seven_commands(
    guard: Guard, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before sending: one EVALSHA whose script reads every key in one MGET (the claim, sent
    marker, first_seen and turn; the suppression, both holds and the pace; the recipient's
    log), reads TIME (the claim's lease and the decision share it), takes the claim with
    first_seen in it (one SET) and writes the log. After: SET of the sent marker and DEL of
    the claim, one pipeline. Seven commands in all."""
    client = redis.Redis.from_url(redis_url)
    assert guard.process(_mail()).outcome.status == "sent"  # scripts loaded, clock read
    client.config_resetstat()
    trips, step = round_trips(monkeypatch, lambda: guard.process(_mail()))
    assert isinstance(step, Finish) and step.outcome.status == "sent"
    assert _calls(client) == {"evalsha": 1, "mget": 1, "set": 3, "time": 1, "del": 1}
    assert trips == 2
    client.close()


def test_a_booked_mail_and_its_run_at_the_slot_ride_too(
    guard: Guard, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second mail to one recipient is booked (1/60s) in the claim's round trip, and gives
    the claim back in one more; its run at the slot finds its booking in the log (the
    decision's general path reads it again) and is sent: the answers of the usual path."""
    client = redis.Redis.from_url(redis_url)
    for to in ("warm@example.com", "warm@example.com", "ada@example.com"):  # scripts loaded
        guard.process(_mail(to))
    client.config_resetstat()
    trips, booked = round_trips(monkeypatch, lambda: guard.process(_mail("ada@example.com")))
    assert isinstance(booked, Later) and booked.outcome.reason == "booked"
    assert trips == 2  # the ride, then the unclaim (first_seen kept in the claim: SET)
    assert _calls(client) == {"evalsha": 2, "mget": 1, "set": 3, "time": 1, "get": 1, "del": 1}
    assert booked.outcome.due is not None
    slot = booked.progress
    ledger = guard.ledger
    assert isinstance(ledger, RedisLedger)
    # At its slot: the limiter's clock moved on (the recipient's log, shifted 60 s back).
    key = guard.limiter.storage_key("recipient", "ada@example.com")
    _shift(client, key, 61_000)
    again = guard.process(_mail("ada@example.com", booked.outcome.mail_id), slot)
    assert isinstance(again, Finish) and again.outcome.status == "sent"
    client.close()


def _shift(client: redis.Redis, key: str, ms: int) -> None:
    """Move every entry of a sliding log ``ms`` into the past (its 6-byte base)."""
    raw = client.get(key)
    assert raw is not None
    base = int.from_bytes(raw[:6], "big") - ms
    client.set(key, base.to_bytes(6, "big") + raw[6:], px=client.pttl(key))


def test_a_suppressed_recipient_is_dropped_and_takes_no_slot(guard: Guard) -> None:
    """A gate key read non-empty: nothing decided in the script; the gate drops the mail and
    the recipient's log is untouched."""
    guard.suppressions.suppress("bob@example.com", seconds=60, cause="550 5.1.1 user unknown")
    dropped = guard.process(_mail("bob@example.com"))
    assert (dropped.outcome.status, dropped.outcome.reason) == ("dropped", "suppressed")
    assert guard.limiter.peek("bob@example.com").remaining == (1, 5, 10)


def test_a_held_sender_books_after_the_hold_as_without_the_ride(
    guard: Guard, redis_url: str
) -> None:
    """A sender hold in force: no decision in the script; the holds gate books the mail after
    the hold (deferred / held), and the recipient keeps one booking, not an admission too."""
    assert guard.holds is not None
    guard.holds.hold_sender(30, "454 4.7.0 Throttling failure")
    held = guard.process(_mail("cy@example.com"))
    assert (held.outcome.status, held.outcome.reason) == ("deferred", "held")
    client = redis.Redis.from_url(redis_url)
    log = client.get(guard.limiter.storage_key("recipient", "cy@example.com")) or b""
    assert len(log) == 6 + 10, "one entry: the booking after the hold, no admission now"
    client.close()


def test_a_copy_of_a_first_run_holds_its_admission_not_a_new_one(
    guard: Guard, redis_url: str
) -> None:
    """A first run that died after its admission (its claim's lease over, first_seen kept):
    its copy is not decided in the script (first_seen kept is not its own) and is judged by
    the limiter against the first run's admission, as without the ride: sent, one entry."""
    request = _mail("dee@example.com")
    ledger = guard.ledger
    assert isinstance(ledger, RedisLedger)
    first_seen = guard.limiter.now() - 5
    assert ledger.begin(request.mail_id, "dead-run", 0.001, first_seen=first_seen)
    assert guard.limiter.acquire("dee@example.com", mail_id=request.mail_id).allowed
    client = redis.Redis.from_url(redis_url)
    client.delete(f"mailguard:claim:{{{request.mail_id}}}")  # its lease is over
    copy = guard.process(request)
    assert isinstance(copy, Finish) and copy.outcome.status == "sent"
    assert guard.limiter.peek("dee@example.com").remaining == (0, 4, 9), "one entry"
    client.close()


def test_a_later_run_rides_with_its_own_first_seen(guard: Guard) -> None:
    """A run whose progress carries first_seen (turn 1) gives none to the ledger: its decision
    rides, and a mail past its kind's deadline is dropped expired without one."""
    now = guard.limiter.now()
    late = Progress(first_seen=now - 10 * 86_400, turn=1, parent="p")
    expired = guard.process(_mail("eve@example.com"), late)
    assert (expired.outcome.status, expired.outcome.reason) == ("dropped", "expired")
    assert guard.limiter.peek("eve@example.com").remaining == (1, 5, 10)
    fresh = guard.process(_mail("eve@example.com"), Progress(first_seen=now, turn=1, parent="p"))
    assert fresh.outcome.status == "sent"


def test_the_composed_script_needs_the_ride_marker_once() -> None:
    with pytest.raises(ValueError, match="RIDE"):
        compose("return 1", "return 2")
    source, sha = compose(BEGIN_SCRIPT, "return 'decided'")
    assert "local function decide(KEYS, ARGV, redis)" in source and len(sha) == 40


def test_separate_urls_take_the_usual_path(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger on its own URL (another client): the claim alone, then the gates and the
    limiter on their own; the mail is sent all the same."""
    other = redis_url + ("&" if "?" in redis_url else "?") + "socket_timeout=3"
    settings = _settings(redis_url, MAILGUARD_LEDGER_URL=other)
    guard = build_guard(settings, metrics=NO_METRICS)
    assert guard.process(_mail()).outcome.status == "sent"
    trips, step = round_trips(monkeypatch, lambda: guard.process(_mail()))
    assert step.outcome.status == "sent" and trips > 2
    guard.limiter.close()


@pytest.mark.redis
@pytest.mark.slow
def test_on_a_redis_cluster_the_usual_path_sends_once(cluster: RedisClusterServers) -> None:
    """On Cluster the mail's keys, the gates' and the recipient's log live in different slots:
    the claim alone (its keys share the mail id's slot), then the gates and the limiter on
    their own. Sent once; a copy answers the recorded outcome."""
    guard = build_guard(_settings(cluster.url), metrics=NO_METRICS)
    ledger = guard.ledger
    assert isinstance(ledger, RedisLedger) and not ledger.reads_together
    request = _mail("ada@example.com")
    first = guard.process(request)
    assert isinstance(first, Finish) and first.outcome.status == "sent"
    again = guard.process(request)
    assert again.outcome == first.outcome
    assert guard.process(_mail("ada@example.com")).outcome.reason == "booked"
    guard.limiter.close()


def test_a_newsletter_whose_gate_adds_headers_keeps_the_decision_that_rode(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unsubscribe gate passes a bulk mail on with its List-Unsubscribe headers (another
    mail object, the same recipient, kind and tenant): the decision made in the claim's call
    stands, no slot given back, no second decision."""
    settings = _settings(
        redis_url,
        MAILGUARD_SENDER="News <news@example.org>",
        MAILGUARD_KIND_NEWSLETTER_UNSUBSCRIBE="1",
        MAILGUARD_UNSUBSCRIBE_URL="https://example.org/unsubscribe",
    )
    guard = build_guard(settings, metrics=NO_METRICS)
    client = redis.Redis.from_url(redis_url)

    def newsletter() -> Any:
        n = next(_ids)
        request = MailRequest(
            to=f"n{n}@example.com", mail_id=f"n{n}", kind="newsletter", subject="s", body="b"
        )
        return guard.process(request)

    assert newsletter().outcome.status == "sent"
    client.config_resetstat()
    trips, step = round_trips(monkeypatch, newsletter)
    assert step.outcome.status == "sent"
    assert _calls(client) == {"evalsha": 1, "mget": 1, "set": 3, "time": 1, "del": 1}
    assert trips == 2
    sent = guard.transport.sent[-1]  # type: ignore[attr-defined]
    assert "List-Unsubscribe" in str(sent)
    client.close()
    guard.limiter.close()
