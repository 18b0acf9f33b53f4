"""Settling: the ledger's effects once a run holds the claim, in one place.

Finished (sent or dropped) and failed mails are recorded, which drops the claim: final means
final, a redelivered copy answers the recorded outcome. A failed mail first gives the
recipient's slot back (the recipient should not pay for our failure). A mail that runs again
gives the claim back. A backend that is down here is logged and counted, never raised: the
step stands.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from mailer.errors import BackendUnavailable
from mailer.guard.data import Prepared, log_fields
from mailer.metrics import Metrics
from mailer.outcomes import Outcome
from mailer.records.ledger import Ledger
from mailer.steps import Fail, Later, Step

log = logging.getLogger("mailguard")


class Settle:
    """Records, unclaims and releases for a run. ``release`` gives a mail's slot back."""

    def __init__(
        self, ledger: Ledger, metrics: Metrics, release: Callable[[Prepared], None]
    ) -> None:
        self.ledger = ledger
        self.metrics = metrics
        self._release = release

    def settle(self, mail: Prepared, owner: str, step: Step, *, guarded: bool) -> Step:
        """The step to answer, once its effects are carried out. ``guarded``: the mail holds
        a slot (it was admitted by the limiter). If the ledger is down when the claim should
        be given back, the next run may take the claim over (``Progress.stale_owner``)."""
        if isinstance(step, Fail) and guarded:
            self._release(mail)
        if not isinstance(step, Later):
            self.record(step.outcome)
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
        return step

    def record(self, outcome: Outcome) -> None:
        """Record a final outcome; a ledger that is down is logged loudly, never raised."""
        try:
            self.ledger.record(outcome)
        except BackendUnavailable:
            # The outcome stands; only the marker is missing. A redelivered copy would find the
            # claim (until its lease ends): log loudly rather than fail a finished mail.
            self.metrics.backend_down("ledger")
            log.error(
                "mail %s %s but its outcome could not be recorded (ledger unavailable)",
                outcome.mail_id,
                outcome.status,
                extra=log_fields(outcome),
            )
