"""Two copies of one mail (broker redelivery) interleaved at the worst moment: still one mail."""

from __future__ import annotations

from collections.abc import Callable

from mailer import Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import Finish, MailRequest, Step
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
    ) -> Begun:
        hook, self.before_claim = self.before_claim, None
        if hook is not None:
            hook()
        return super().begin(mail_id, owner, lease, takeover=takeover, first_seen=first_seen)


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
