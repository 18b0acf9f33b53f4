"""The reputation gate: a sender paused by its reputation sends no bulk mail
(:mod:`mailer.records.reputation`).

Before admission, a mail of a bulk kind whose sender is paused waits: ``deferred`` /
``reputation``, run again after ``REPUTATION_RECHECK`` (5 min), when the gate looks again; it
is never dropped for the pause itself (a pause longer than the kind's ``max_wait`` ends it
``expired`` at admission, as any wait would). A run that finds a pause asks the counters once
more (one script call): the pause lifts there when the rate fell back. Mails of other kinds
pass. The pause is read with the suppression list (one ``MGET``). On a send error, a hard
bounce counts against the sender (as a mail sent and a bounce). A reputation that cannot be
read lets the mail through (logged): the counters guard the sender, never hold its mail.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from mailer import defaults
from mailer import outcomes as why
from mailer.durations import human
from mailer.errors import BackendUnavailable, PermanentSendError
from mailer.guard.data import Admitted, GuardConfig, Prepared, Refused, log_fields
from mailer.guard.gates import Reads
from mailer.mail.replies import Action, reaction_of
from mailer.metrics import Metrics
from mailer.records.reputation import Pause, Reputation
from mailer.records.reputation.base import percent
from mailer.steps import Later, Progress, Step

log = logging.getLogger("mailguard")


class ReputationGate:
    """Defers bulk mails of a paused sender; counts hard bounces in SMTP replies."""

    def __init__(
        self,
        reputation: Reputation,
        config: GuardConfig,
        metrics: Metrics,
        *,
        recheck: float = defaults.REPUTATION_RECHECK,
    ) -> None:
        self.reputation = reputation
        self.config = config
        self.metrics = metrics
        self.recheck = recheck  # s: how long a paused mail waits before it looks again

    def reads(self, mail: Prepared) -> Reads | None:
        if mail.more_keys:
            return None
        read = self.reputation.pause_read(mail.draft.sender)
        if read is None:
            return None
        return (read[0], [read[1]] if mail.kind.unsubscribe else [])

    def before_admit(
        self, mail: Prepared, progress: Progress, raws: list[Any] | None
    ) -> Prepared | Admitted | Step:
        if not mail.kind.unsubscribe:
            return mail
        sender = mail.draft.sender
        try:
            pause = Pause.from_json(raws[0]) if raws else self.reputation.pause_of(sender)
            if pause is None or not pause.paused:
                return mail
            pause = self.reputation.check(sender).pause  # the rate may have fallen back
        except BackendUnavailable:
            self.metrics.backend_down("ledger")
            log.warning("mail %s: sender reputation unreadable (ledger down)", mail.mail_id)
            return mail
        if pause is None or not pause.paused:
            return mail
        return self._deferred(mail, progress, pause)

    def _deferred(self, mail: Prepared, progress: Progress, pause: Pause) -> Later:
        progress = replace(progress, deferrals=progress.deferrals + 1)
        detail = (
            f"sender {pause.sender} paused: {pause.rate} rate {percent(pause.value)} >= "
            f"{percent(pause.threshold)}"
        )
        waiting = mail.base.but(
            status="deferred",
            reason=why.REPUTATION,
            wait=self.recheck,
            deferrals=progress.deferrals,
            detail=detail,
        )
        log.info(
            "mail %s deferred %s: %s",
            mail.mail_id,
            human(self.recheck),
            detail,
            extra=log_fields(waiting),
        )
        return Later(self.recheck, waiting, progress)

    def on_send_error(self, mail: Prepared, refused: Refused) -> Admitted | Step | None:
        """A hard bounce counts against the sender; the mail's answer is left to the rest."""
        exc = refused.error
        if isinstance(exc, PermanentSendError) and reaction_of(exc).action is Action.SUPPRESS:
            try:
                self.reputation.count_bounce(mail.draft.sender, sent=True)
            except BackendUnavailable:
                self.metrics.backend_down("ledger")
                log.warning("mail %s: bounce not counted (ledger down)", mail.mail_id)
        return None
