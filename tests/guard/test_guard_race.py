"""Two copies of one mail (broker redelivery) interleaved at the worst moment: still one mail."""

from __future__ import annotations

from collections.abc import Callable

from mailer import Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import Finish, Guard, Later, MailRequest, Step
from mailer.mail.transports import MemoryTransport
from mailer.records.ledger import Begun, MemoryLedger


class InterleavingLedger(MemoryLedger):
    """A memory ledger that runs ``before_claim`` once, just before the next begin."""

    before_claim: Callable[[], None] | None = None

    def begin(
        self,
        mail_id: str,
        owner: str,
        lease: float,
        *,
        takeover: str | None = None,
        first_seen: float | None = None,
        turn: int | None = None,
    ) -> Begun:
        hook, self.before_claim = self.before_claim, None
        if hook is not None:
            hook()
        return super().begin(
            mail_id, owner, lease, takeover=takeover, first_seen=first_seen, turn=turn
        )


def test_a_copy_that_finished_between_check_and_claim_is_not_sent_again(
    clock: ManualClock,
) -> None:
    """Copy B checked the ledger (nothing yet); copy A then sent and recorded; B sends nothing."""
    limiter = Limiter.from_url("memory://", Policy.parse("1/60s"), clock=clock)
    ledger = InterleavingLedger(clock)
    transport = MemoryTransport()
    guard = memory_guard(limiter, ledger, transport, kinds=Kinds.defaults(), clock=clock)
    request = MailRequest(to="ada@example.com", mail_id="m1", subject="s", body="b")
    other: list[Step] = []
    ledger.before_claim = lambda: other.append(guard.process(request))  # copy A, all of it
    step = guard.process(request)  # copy B
    assert isinstance(other[0], Finish) and other[0].outcome.status == "sent"
    assert len(transport.sent) == 1
    assert isinstance(step, Finish) and step.outcome == other[0].outcome


def _booked(clock: ManualClock) -> tuple[Guard, MemoryTransport, MailRequest, Later]:
    """A guard under ``1/60s`` that sent ``m1`` to ada now, and ``m2``'s first run, which
    booked a slot 60 s ahead and handed the mail on (turn 1)."""
    limiter = Limiter.from_url("memory://", Policy.parse("1/60s"), clock=clock)
    ledger, transport = MemoryLedger(clock), MemoryTransport()
    guard = memory_guard(limiter, ledger, transport, kinds=Kinds.defaults(), clock=clock)
    first = guard.process(MailRequest(to="ada@example.com", mail_id="m1", subject="s", body="b"))
    assert isinstance(first, Finish) and first.outcome.status == "sent"
    request = MailRequest(to="ada@example.com", mail_id="m2", subject="s", body="b")
    booked = guard.process(request)
    assert isinstance(booked, Later) and booked.progress.turn == 1
    return guard, transport, request, booked


def test_copies_of_a_deferred_run_collapse_into_one(clock: ManualClock) -> None:
    """A deferred mail's next run and a copy of it (the watchdog's, when the run started
    late) both run and each hands the mail on (here hops towards its slot): two sibling
    chains. The first of them to claim its next run carries the mail on; the other is stale
    and ends without a trace, so siblings never keep hopping side by side. The chain that goes
    on sends once, at its slot."""
    guard, transport, request, booked = _booked(clock)
    clock.advance(20.0)
    hop = guard.process(request, booked.progress)  # the countdown, early: a hop
    twin = guard.process(request, booked.progress)  # the watchdog's copy of the same message
    assert isinstance(hop, Later) and isinstance(twin, Later)
    assert hop.progress.turn == twin.progress.turn == 2
    assert hop.progress.parent != twin.progress.parent
    clock.advance(20.0)
    going = guard.process(request, hop.progress)
    stale = guard.process(request, twin.progress)
    assert isinstance(going, Later) and going.progress.turn == 3
    assert isinstance(stale, Finish)
    assert (stale.outcome.status, stale.outcome.reason) == ("deferred", "superseded")
    clock.advance(20.0)
    done = guard.process(request, going.progress)
    assert isinstance(done, Finish) and done.outcome.status == "sent"
    assert len(transport.sent) == 2
    late = guard.process(request, twin.progress)
    assert isinstance(late, Finish) and late.outcome == done.outcome, "a repeat"


def test_a_copy_of_a_first_run_after_the_mail_moved_on_is_stale(clock: ManualClock) -> None:
    """A first run booked the mail and handed it on; its next run (turn 1) claimed and handed
    it on again. A copy of the first message (a redelivery: its first run was killed after
    it parked the mail, before the ack) then runs: it is stale and ends without a trace, so
    its own next run cannot take the place of the live chain's (a parked entry is one per
    mail: the copy's would replace the live one and then be ended as a sibling, the mail
    lost). The live chain sends once, at its slot."""
    guard, transport, request, booked = _booked(clock)
    clock.advance(20.0)
    hop = guard.process(request, booked.progress)  # turn 1, early: hands the mail on again
    assert isinstance(hop, Later) and hop.progress.turn == 2
    copy = guard.process(request)  # the first message again
    assert isinstance(copy, Finish)
    assert (copy.outcome.status, copy.outcome.reason) == ("deferred", "superseded")
    clock.advance(40.0)
    done = guard.process(request, hop.progress)
    assert isinstance(done, Finish) and done.outcome.status == "sent"
    assert len(transport.sent) == 2
