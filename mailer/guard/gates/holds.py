"""The holds gate: after a throttling reply, wait the hold out instead of retrying at once.

Before admission, a mail meets the holds in force (the sender's, and its recipient's; see
:mod:`mailer.records.holds`): with one, it is booked at the earliest slot after the hold ends
(``deferred`` / ``held``) without opening an SMTP transaction. On a send error whose reply asks
to slow down (:func:`mailer.mail.replies.classify`), the sender (or that recipient) is held,
the mail's slot is given back and the mail booked after the hold. The holds live where the
limiter does: a holds store that is down is the limiter down (``fail_closed`` defers,
``fail_open`` goes on to the limiter). Use only with holds on (``throttle_hold`` not None).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from mailer import defaults
from mailer import outcomes as why
from mailer.errors import BackendUnavailable, TransientSendError
from mailer.guard.booking import After, Booking
from mailer.guard.data import Admitted, GuardConfig, Prepared, Refused, iso, log_fields
from mailer.guard.gates import Reads
from mailer.guard.outage import backend_down
from mailer.mail.replies import Action, classify, enhanced_status
from mailer.metrics import Metrics
from mailer.records.holds import RECIPIENT, SENDER, Hold, Holds
from mailer.steps import Progress, Step

log = logging.getLogger("mailguard")

#: Recipient holds a worker remembers (to log their end once); the oldest are forgotten first.
_KNOWN_HOLDS = 1024


class HoldsGate:
    """Books held mails after their hold; starts a hold on a throttling reply."""

    def __init__(
        self, holds: Holds, booking: Booking, config: GuardConfig, metrics: Metrics
    ) -> None:
        self.holds = holds
        self.booking = booking
        self.config = config
        self.metrics = metrics
        # The holds this worker knows are in force (scope or recipient hash -> until), to log
        # their end once.
        self._known: dict[str, float] = {}
        self._known_lock = threading.Lock()

    def reads(self, mail: Prepared) -> Reads | None:
        return self.holds.plain_read(mail.limit_key)

    def before_admit(
        self, mail: Prepared, progress: Progress, raws: list[Any] | None
    ) -> Prepared | Admitted | Step:
        """With a hold in force, the mail booked after it (``deferred`` / ``held``, or
        :class:`Admitted` when the limiter's clock says it is over); else ``mail`` goes on."""
        try:
            if raws is not None:
                sender, recipient = self.holds.from_raws(raws)
            else:
                sender, recipient = self.holds.active(mail.limit_key)
        except BackendUnavailable as exc:
            self.metrics.backend_down("limiter")
            if self.config.fail_open:
                return mail
            return backend_down(self.config, mail.base, progress, exc, why.LIMITER_UNAVAILABLE)
        self._note(SENDER, SENDER, sender)
        self._note(mail.base.recipient or "", f"recipient {mail.base.recipient}", recipient)
        scope, hold = (SENDER, sender) if sender is not None else (RECIPIENT, recipient)
        if recipient is not None and (sender is None or recipient.until > sender.until):
            scope, hold = RECIPIENT, recipient
        if hold is None or (progress.due and progress.due >= hold.until):
            return mail  # no hold, or already booked after it (a hop towards its slot)
        after = After(scope, hold)
        return self.booking.after_hold(mail, mail.base, progress, after, holds_slot=False)

    def on_send_error(self, mail: Prepared, refused: Refused) -> Admitted | Step | None:
        """A reply that asks to slow down holds the sender (or this recipient): the slot is
        given back and the mail booked after the hold. Other errors: None."""
        exc = refused.error
        if not isinstance(exc, TransientSendError) or exc.code is None:
            return None
        reaction = classify(exc.code, exc.reply or "")
        if not reaction.hold_action:
            return None
        progress = refused.progress
        base = refused.base.but(
            attempts=progress.attempts, smtp_code=exc.code, smtp_reply=exc.reply
        )
        seconds = reaction.hold or self.config.throttle_hold or defaults.THROTTLE_HOLD
        cause = f"{exc.code} {exc.reply or ''}".strip()
        scope = SENDER if reaction.action is Action.HOLD_SENDER else RECIPIENT
        try:
            if scope == SENDER:
                hold = self.holds.hold_sender(seconds, cause)
            else:
                hold = self.holds.hold_recipient(mail.limit_key, seconds, cause)
        except BackendUnavailable as down:
            # The hold could not be written: its store is the limiter's, so the limiter is
            # down too; defer (fail_closed or not: this mail was just refused).
            self.metrics.backend_down("limiter")
            self.booking.release(mail)
            return backend_down(self.config, base, progress, down, why.LIMITER_UNAVAILABLE)
        who = SENDER if scope == SENDER else f"recipient {mail.base.recipient}"
        self._note(SENDER if scope == SENDER else mail.base.recipient or "", who, hold)
        self.metrics.hold(scope, _cause_label(exc.code, exc.reply))
        log.warning(
            "hold started: %s until %s (%s)",
            who,
            iso(hold.until),
            cause,
            extra=log_fields(base) | {"hold": scope, "until": hold.until, "level": hold.level},
        )
        return self.booking.after_hold(mail, base, progress, After(scope, hold), holds_slot=True)

    def _note(self, name: str, who: str, hold: Hold | None) -> None:
        """Remember the holds this worker has seen; log once when one it knew has ended."""
        with self._known_lock:
            if hold is not None:
                self._known.pop(name, None)
                self._known[name] = hold.until
                while len(self._known) > _KNOWN_HOLDS:
                    del self._known[next(iter(self._known))]
                return
            if self._known.pop(name, None) is None:
                return
        log.info("hold ended: %s", who, extra={"hold": who})


def _cause_label(code: int | None, reply: str | None) -> str:
    """A bounded metrics label for a reply: its code and enhanced status (``454 4.7.0``)."""
    status = enhanced_status(reply or "")
    return f"{code} {status}" if status else str(code)
