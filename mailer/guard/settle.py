"""Settling: the ledger's effects once a run holds the claim, in one place.

Finished (sent or dropped) and failed mails are recorded, which drops the claim: final means
final, a redelivered copy answers the recorded outcome. A failed mail first gives the
recipient's slot back (the recipient should not pay for our failure). A mail that runs again
gives the claim back. A backend that is down here is logged and counted, never raised: the
step stands.

A final outcome that cannot be recorded is tried again (backoff from 50 ms to 1 s) for as long
as the run's claim holds (``claim_lease``): until then no other copy of the mail (a watchdog's,
a redelivery) can take the claim over, so a ledger back within the lease means no mail sent
twice. The run's worker waits that long at most; past it the outcome stands unrecorded and is
logged loudly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from mailer.errors import BackendUnavailable
from mailer.guard.data import Prepared, log_fields
from mailer.metrics import Metrics
from mailer.outcomes import Outcome
from mailer.records.ledger import Ledger
from mailer.steps import Fail, Later, Step

log = logging.getLogger("mailguard")

#: Characters of a run's owner id a next run carries as its parent (32 bits: two runs of one
#: mail never share them by chance).
PARENT = 8


class Settle:
    """Records, unclaims and releases for a run. ``release`` gives a mail's slot back."""

    def __init__(
        self,
        ledger: Ledger,
        metrics: Metrics,
        release: Callable[[Prepared], None],
        *,
        patience: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ledger = ledger
        self.metrics = metrics
        self._release = release
        self.patience = patience  # s: how long a final record is tried again (the claim lease)
        self._sleep = sleep
        self._monotonic = monotonic
        #: Records a mail sent in place of ``ledger.record`` (with the sender reputation's
        #: count on the same round trip: :func:`mailer.guard.gates.bulk.sent_recorder`).
        self.record_sent: Callable[[Prepared, Outcome], None] | None = None

    def settle(self, mail: Prepared, owner: str, step: Step, *, guarded: bool) -> Step:
        """The step to answer, once its effects are carried out. ``guarded``: the mail holds
        a slot (it was admitted by the limiter). If the ledger is down when the claim should
        be given back, the next run may take the claim over (``Progress.stale_owner``)."""
        if isinstance(step, Fail) and guarded:
            self._release(mail)
        if not isinstance(step, Later):
            self.record(step.outcome, mail if step.outcome.status == "sent" else None)
            return step
        try:
            self.ledger.unclaim(mail.mail_id, owner)
        except BackendUnavailable:
            self.metrics.backend_down("ledger")
            log.warning(
                "mail %s: claim left to its next run (ledger unavailable)",
                mail.mail_id,
                extra={"mail_id": mail.mail_id},
            )
            return replace(step, progress=replace(step.progress, stale_owner=owner))
        turn = max(step.progress.turn, 0) + 1  # the next run's (Progress.turn)
        return replace(step, progress=replace(step.progress, turn=turn, parent=owner[:PARENT]))

    def record(self, outcome: Outcome, sent: Prepared | None = None) -> None:
        """Record a final outcome, tried again while the claim holds (``patience`` s); a
        ledger still down then is logged loudly, never raised. ``sent``: the mail, when it was
        sent (recorded through ``record_sent`` when set)."""
        deadline = self._monotonic() + self.patience
        pause = 0.05
        while True:
            try:
                if sent is not None and self.record_sent is not None:
                    self.record_sent(sent, outcome)
                else:
                    self.ledger.record(outcome)
                return
            except BackendUnavailable:
                self.metrics.backend_down("ledger")
                if self._monotonic() + pause > deadline:
                    break
            self._sleep(pause)
            pause = min(pause * 2, 1.0)
        # The outcome stands; only the marker is missing. A later copy may take the claim over
        # now that its lease is over: log loudly rather than fail a finished mail.
        log.error(
            "mail %s %s but its outcome could not be recorded (ledger unavailable)",
            outcome.mail_id,
            outcome.status,
            extra=log_fields(outcome),
        )
