"""Every run is judged against the slot it was admitted for, a first run's copy included.

A first run whose process dies inside SMTP (after its admission, before the server took the
mail) leaves its admission in the limiter and its claim in the ledger; after the claim's lease
a redelivered copy of the same message runs, with no progress of its own. It counts its kind's
deadline from the first run (the ledger's ``begin`` remembers ``first_seen``) and is judged
like any late run: within ``MAILGUARD_LATE_TOLERANCE`` of its slot it keeps it, later it is
sent now, booked again or dropped by its kind's deadline, against the mails sent meanwhile.

On the real Redis limiter (its Lua script, on an injected clock: the script takes the time
as an argument) and the memory one (the pure algorithm it mirrors), through the guard with a
ledger on the same clock; the ledger's memory of ``first_seen`` on Redis too. The same run in
a real worker whose pool child is SIGKILLed mid-SMTP: tests/workers/celery/test_first_run_killed.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from mailer import Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import Finish, GuardConfig, Later, MailRequest, Progress
from mailer.guard.engine import Guard
from mailer.mail.envelope import Envelope
from mailer.mail.kinds import Kind
from mailer.mail.transports import MemoryTransport
from mailer.mail.transports.base import SendReceipt
from mailer.outcomes import Outcome
from mailer.records.ledger import Claimed, MemoryLedger, RedisLedger

ADA = "ada@example.com"
POLICY = "1/60s, 50/1d"
TOLERANCE = 1.0
LEASE = 30.0  # the claim lease (s): a copy of a dead run claims the mail after it


class Killed(BaseException):
    """The process died here (as a SIGKILL would end the run: nothing after it runs)."""


class DyingTransport(MemoryTransport):
    """A memory transport inside which the process dies once for each mail id in ``doomed``."""

    def __init__(self, doomed: set[str]) -> None:
        super().__init__()
        self.doomed = doomed

    def send(self, envelope: Envelope) -> SendReceipt:
        subject = str(envelope.message["Subject"])
        if subject in self.doomed:
            self.doomed.discard(subject)
            raise Killed(subject)
        return super().send(envelope)


@pytest.fixture(params=["memory", "redis"])
def limiter_url(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return "memory://"
    return str(request.getfixturevalue("redis_url"))


@pytest.fixture
def dying_guard(
    limiter_url: str, clock: ManualClock
) -> Iterator[tuple[Guard, DyingTransport, ManualClock]]:
    policy = Policy.parse(POLICY, name="recipient")
    secret = None if limiter_url == "memory://" else "s"
    limiter = Limiter.from_url(limiter_url, policy, clock=clock, secret=secret)
    assert limiter.judges_lateness
    transport = DyingTransport(set())
    kinds = Kinds.defaults().with_kind(Kind("short", subject="s", body="b", max_wait=100.0))
    config = GuardConfig(late_tolerance=TOLERANCE, claim_lease=LEASE)
    guard = memory_guard(
        limiter, MemoryLedger(clock), transport, kinds=kinds, config=config, clock=clock
    )
    yield guard, transport, clock
    limiter.close()


def mail(mail_id: str, kind: str = "default") -> MailRequest:
    if kind == "code":
        return MailRequest(to=ADA, mail_id=mail_id, kind=kind, context={"code": "1"})
    return MailRequest(to=ADA, mail_id=mail_id, kind=kind, subject=mail_id, body="b")


def dies_in_smtp(guard: Guard, transport: DyingTransport, request: MailRequest) -> None:
    """A first run admitted now whose process dies inside SMTP."""
    transport.doomed.add(str(request.subject) if request.subject else "")
    with pytest.raises(Killed):
        guard.process(request)


def until_final(guard: Guard, clock: ManualClock, request: MailRequest, step: Later) -> Outcome:
    """Follow a mail's countdowns until it finishes; its final outcome."""
    while isinstance(step, Later):
        clock.advance(step.wait)
        result = guard.process(request, step.progress)
        if not isinstance(result, Later):
            assert isinstance(result, Finish)
            return result.outcome
        step = result
    raise AssertionError("unreachable")


def test_a_copy_within_the_tolerance_keeps_its_slot(
    dying_guard: tuple[Guard, DyingTransport, ManualClock],
) -> None:
    """Given a first run admitted at S that died in SMTP, when its copy runs 0.9 s after S (a
    short lease), then it is sent on S: admitted at S before, admitted_at now."""
    guard, transport, clock = dying_guard
    guard.config = GuardConfig(late_tolerance=TOLERANCE, claim_lease=0.5)
    guard.kinds = guard.kinds  # the pipeline wired again with the new config
    slot = clock.now
    dies_in_smtp(guard, transport, mail("m1"))
    clock.advance(0.9)
    step = guard.process(mail("m1"))
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    assert step.outcome.due == pytest.approx(slot, abs=0.001), "it kept its slot"
    assert step.outcome.admitted_at == pytest.approx(clock.now, abs=0.001)
    assert len(transport.sent) == 1


def test_a_late_copy_is_booked_again_behind_the_mail_sent_meanwhile(
    dying_guard: tuple[Guard, DyingTransport, ManualClock],
) -> None:
    """Given m1's first run admitted at S and dead in SMTP, and m2 (enqueued 5 s later, booked
    at S + 60 s) sent on time, when m1's copy runs at S + 62 s (after the claim lease and
    more), then it is not sent on its old slot next to m2: it is booked again a spacing after
    m2, and sent there (admitted_at 60 s after m2's)."""
    guard, transport, clock = dying_guard
    slot = clock.now
    dies_in_smtp(guard, transport, mail("m1"))
    clock.advance(5)
    booked = guard.process(mail("m2"))
    assert isinstance(booked, Later) and booked.outcome.due == pytest.approx(slot + 60, abs=0.001)
    clock.set(slot + 60.5)
    sent2 = guard.process(mail("m2"), booked.progress)
    assert isinstance(sent2, Finish) and sent2.outcome.status == "sent", "m2 on its slot"
    clock.set(slot + 62)
    copy = guard.process(mail("m1"))
    assert isinstance(copy, Later) and copy.outcome.reason == "booked", copy
    assert copy.outcome.due == pytest.approx(slot + 120, abs=0.002), "a spacing after m2's slot"
    final = until_final(guard, clock, mail("m1"), copy)
    assert final.status == "sent" and final.admitted_at is not None
    assert sent2.outcome.admitted_at is not None
    assert final.admitted_at - sent2.outcome.admitted_at >= 60 - TOLERANCE
    assert len(transport.sent) == 2


def test_a_late_copy_whose_next_slot_is_past_its_deadline_is_dropped_late(
    dying_guard: tuple[Guard, DyingTransport, ManualClock],
) -> None:
    """As above with a kind that may wait 100 s from its first run: the copy at S + 62 s
    would need S + 120.5 s, past S + 100 s: dropped ``late``, never sent, its slot given
    back (the recipient's next mail is not spaced from a mail that never left)."""
    guard, transport, clock = dying_guard
    slot = clock.now
    dies_in_smtp(guard, transport, mail("m1", "short"))
    clock.advance(5)
    booked = guard.process(mail("m2"))
    assert isinstance(booked, Later)
    clock.set(slot + 60.5)
    assert guard.process(mail("m2"), booked.progress).outcome.status == "sent"
    clock.set(slot + 62)
    copy = guard.process(mail("m1", "short"))
    assert isinstance(copy, Finish), copy
    assert (copy.outcome.status, copy.outcome.reason) == ("dropped", "late")
    assert [m["Subject"] for m in transport.sent] == ["m2"]


def test_a_late_copy_with_room_goes_now_and_the_next_booking_keeps_its_spacing(
    dying_guard: tuple[Guard, DyingTransport, ManualClock],
) -> None:
    """Given m1 admitted at S and dead in SMTP, m2 booked at S + 60 s, when m1's copy runs at
    S + 31 s (the lease), then it is sent now (nothing was sent within the spacing), and m2,
    on time at its slot, is booked again a spacing after m1's real admission."""
    guard, transport, clock = dying_guard
    slot = clock.now
    dies_in_smtp(guard, transport, mail("m1"))
    clock.advance(5)
    booked = guard.process(mail("m2"))
    assert isinstance(booked, Later)
    clock.set(slot + LEASE + 1)
    copy = guard.process(mail("m1"))
    assert isinstance(copy, Finish) and copy.outcome.status == "sent", copy
    assert copy.outcome.admitted_at == pytest.approx(slot + LEASE + 1, abs=0.002)
    final = until_final(guard, clock, mail("m2"), booked)
    assert final.status == "sent" and final.admitted_at is not None
    assert final.admitted_at - copy.outcome.admitted_at >= 60 - TOLERANCE


def test_a_copy_counts_its_kinds_deadline_from_the_first_run(
    dying_guard: tuple[Guard, DyingTransport, ManualClock],
) -> None:
    """A ``code`` mail whose first run died in SMTP, its copy back 18.6 s later (past the
    kind's wait from the first run): dropped ``expired``, never sent, its slot given back."""
    guard, transport, clock = dying_guard
    guard.config = GuardConfig(late_tolerance=TOLERANCE, claim_lease=10.0)
    guard.kinds = guard.kinds.with_kind(Kind("code", max_wait=8.0, subject="c", body="{code}"))
    transport.doomed.add("c")
    with pytest.raises(Killed):
        guard.process(mail("c1", "code"))
    clock.advance(18.6)
    copy = guard.process(mail("c1", "code"))
    assert isinstance(copy, Finish), copy
    assert (copy.outcome.status, copy.outcome.reason) == ("dropped", "expired")
    assert transport.sent == []
    assert guard.limiter.peek(ADA).allowed, "the first run's slot was given back"


@pytest.mark.redis
def test_the_redis_ledger_remembers_the_first_runs_first_seen(redis_url: str) -> None:
    """``begin`` with ``first_seen`` keeps the first one it was given (a copy gets the first
    run's), in the same call; a recorded outcome forgets it; no ``first_seen``: True."""
    client = redis.Redis.from_url(redis_url)
    ledger = RedisLedger(client, redis_url)
    assert ledger.begin("m", "w1", LEASE, first_seen=100.25) == Claimed(100.25)
    assert ledger.begin("m", "w2", LEASE, first_seen=200.0) is False, "w1 holds it"
    assert ledger.begin("m", "w2", LEASE, takeover="w1", first_seen=200.0) == Claimed(100.25)
    assert ledger.begin("m", "w2", LEASE) is True
    ledger.record(Outcome(status="dropped", mail_id="m", kind="default"))
    assert client.exists("mailguard:claim:{m}") == 0, "first_seen went with the claim"
    assert ledger.begin("n", "w1", LEASE, first_seen=1_700_000_000.123) == Claimed(
        1_700_000_000.123
    )
    assert 0 < client.ttl("mailguard:claim:{n}") <= 86_400, "kept in the claim, for a day"
    client.close()


def test_the_memory_ledger_remembers_the_first_runs_first_seen(clock: ManualClock) -> None:
    """The same contract in memory: the first ``first_seen`` wins until an outcome is kept."""
    ledger = MemoryLedger(clock)
    assert ledger.begin("m", "w1", LEASE, first_seen=100.25) == Claimed(100.25)
    clock.advance(LEASE + 1)
    assert ledger.begin("m", "w2", LEASE, first_seen=200.0) == Claimed(100.25)
    ledger.record(Outcome(status="dropped", mail_id="m", kind="default"))
    assert ledger.begin("m", "w3", LEASE, first_seen=300.0) == ledger.recorded("m")
    assert ledger.begin("n", "w1", LEASE, first_seen=300.0) == Claimed(300.0)


def test_a_first_run_within_its_claim_is_not_a_copy(clock: ManualClock) -> None:
    """An ordinary first run is sent at once, ``admitted_at`` its admission (the memory
    limiter's clock), ``due`` its slot; a repeated run answers the recorded outcome."""
    limiter = Limiter.from_url("memory://", Policy.parse(POLICY), clock=clock)
    transport = MemoryTransport()
    guard = memory_guard(limiter, MemoryLedger(clock), transport, clock=clock)
    step = guard.process(mail("m1"), Progress())
    assert isinstance(step, Finish) and step.outcome.admitted_at == clock.now
    assert step.outcome.due == pytest.approx(clock.now, abs=0.001)
    assert guard.process(mail("m1")).outcome == step.outcome


def test_a_copy_meeting_a_hold_gives_its_first_runs_admission_back_and_waits(
    dying_guard: tuple[Guard, DyingTransport, ManualClock],
) -> None:
    """Given m1 admitted at S and dead in SMTP, and the sender held (a stated 120 s) before
    its copy runs at S + 31 s, then the copy is not sent on its old admission: it gives it
    back and is booked at the hold's end (``held``), and sent only then."""
    guard, transport, clock = dying_guard
    slot = clock.now
    dies_in_smtp(guard, transport, mail("m1"))
    clock.set(slot + LEASE + 1)
    assert guard.holds is not None
    hold = guard.holds.hold_sender(120, "454 4.7.0 Throttling failure", stated=True)
    copy = guard.process(mail("m1"))
    assert isinstance(copy, Later) and copy.outcome.reason == "held", copy
    assert copy.outcome.due is not None and copy.outcome.due >= hold.until
    final = until_final(guard, clock, mail("m1"), copy)
    assert final.status == "sent" and final.admitted_at is not None
    assert final.admitted_at >= hold.until
    assert len(transport.sent) == 1
