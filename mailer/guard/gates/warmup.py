"""The warm-up gate: a sender on a warm-up plan sends no more in a day than the plan allows
(:mod:`mailer.records.warmup`).

Before admission, each mail of a sender on a plan is counted for it (one script call: the
day, the count and the allowance in one atomic step). A mail over the day's allowance waits
for the next day: ``deferred`` / ``warmup``, run again when the next day starts plus
:data:`ORDER_STEP` per place among the day's waiting mails, so they come back in the order
they came. It is never dropped for the plan (a wait past the kind's ``max_wait`` ends it
``expired`` at admission, as any wait would). A transactional kind is counted and never
waits. A mail run again after its booking is not counted twice, nor one past its deadline
(admission ends it ``expired``). A plan that cannot be read
lets the mail through (logged): the plan paces the sender, it never holds mail hostage to an
outage.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from mailer import outcomes as why
from mailer.durations import human
from mailer.errors import BackendUnavailable
from mailer.guard.data import Admitted, GuardConfig, Prepared, Refused, log_fields
from mailer.guard.gates import Reads
from mailer.guard.retry_schedule import kept_for
from mailer.metrics import Metrics
from mailer.records.warmup import Taken, Warmup
from mailer.steps import Later, Progress, Step

log = logging.getLogger("mailguard")

#: Seconds between two waiting mails' runs on the next day: their order kept through the few
#: tens of ms a worker's countdown may drift from the limiter's clock (10 000 waiting mails
#: come back over the next day's first 17 minutes).
ORDER_STEP = 0.1


class WarmupGate:
    """Counts each mail of a sender on a plan; defers what is over the day's allowance."""

    def __init__(self, warmup: Warmup, config: GuardConfig, metrics: Metrics) -> None:
        self.warmup = warmup
        self.config = config
        self.metrics = metrics

    def reads(self, mail: Prepared) -> Reads | None:
        """No key: the count is its own script call; on Redis, the client, so that the other
        gates still read together when they share it."""
        client = self.warmup.client
        return None if client is None else (client, [])

    def before_admit(
        self, mail: Prepared, progress: Progress, raws: list[Any] | None
    ) -> Prepared | Admitted | Step:
        if self._expired(mail, progress):
            return mail  # admission ends it expired: not counted in the day's allowance
        try:
            taken = self.warmup.take(mail.draft.sender, mail.mail_id, force=mail.kind.transactional)
        except BackendUnavailable:
            self.metrics.backend_down("limiter")
            log.warning("mail %s: warm-up plan unreadable (limiter down)", mail.mail_id)
            return mail
        if taken is None or taken.admitted:
            return mail
        return self._deferred(mail, progress, taken)

    def _expired(self, mail: Prepared, progress: Progress) -> bool:
        """Whether the mail is past its kind's deadline (as admission judges it)."""
        if not progress.first_seen:
            return False
        past = self.warmup.now() - progress.first_seen - kept_for(mail.kind, progress, self.config)
        return past > self.config.late_tolerance

    def _deferred(self, mail: Prepared, progress: Progress, taken: Taken) -> Later:
        now = self.warmup.now()
        wait = max(taken.next_day - now, 0.0) + taken.position * ORDER_STEP
        progress = replace(progress, deferrals=progress.deferrals + 1)
        detail = (
            f"warm-up day {taken.day}: {taken.used} of {taken.allowance} mails used; "
            f"waits for day {taken.day + 1} (place {taken.position})"
        )
        waiting = mail.base.but(
            status="deferred",
            reason=why.WARMUP,
            wait=wait,
            due=now + wait,
            decided_at=now,
            deferrals=progress.deferrals,
            detail=detail,
        )
        log.info(
            "mail %s deferred %s: %s",
            mail.mail_id,
            human(wait),
            detail,
            extra=log_fields(waiting),
        )
        return Later(wait, waiting, progress)

    def on_send_error(self, mail: Prepared, refused: Refused) -> Admitted | Step | None:
        return None
