"""Sending an admitted mail through the transport, under the run's claim.

The mail's :class:`~mailer.mail.envelope.Envelope` is made here, once: its message (built now
unless it was built to be checked) with the addresses the validation checked beside it; the
transport sends the envelope.

:meth:`Sending.send` answers ``Finish`` (``sent``), or :class:`~mailer.guard.data.Refused`
when the transport refused the mail: the gates' ``on_send_error`` hooks see it first (a hard
bounce suppresses, a throttling reply holds); :meth:`Sending.after_refusal` is the answer when no
gate took it: ``failed`` for a permanent error; else the mail is tried again later, its own
backoff doubling up to ``retry_backoff_max``, until its kind's lifetime: then ``dropped`` /
``expired`` with the last reply (:mod:`mailer.guard.retry_schedule`). No count of refusals
ends a mail; the quick tries within one run are the transport's (``MAILGUARD_SMTP_ATTEMPTS``).
A mail the server took for some recipients only is ``sent`` / ``partial``, each refused one in
its ``refused`` (:mod:`mailer.guard.corecipients`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from mailer import outcomes as why
from mailer.clock import Clock
from mailer.crashpoints import crash_point
from mailer.durations import human
from mailer.errors import InvalidMessage, PermanentSendError, TransientSendError
from mailer.guard.booking import Booking
from mailer.guard.corecipients import Suppress, refusals
from mailer.guard.data import Admitted, GuardConfig, Prepared, Refused, failure, log_fields
from mailer.guard.retry_schedule import expired, next_try, retry_wait
from mailer.guard.validate import message_of
from mailer.mail.envelope import envelope_of
from mailer.mail.replies import described
from mailer.mail.transports.base import Transport
from mailer.metrics import UNGUARDED
from mailer.steps import Finish, Later, Progress, Step

log = logging.getLogger("mailguard")


class Sending:
    """Sends through ``transport``; ``booking`` gives back the slot of a mail that cannot go;
    ``suppress`` suppresses a co-recipient refused for good (:mod:`mailer.guard.corecipients`;
    default: none is)."""

    def __init__(
        self,
        transport: Transport,
        booking: Booking,
        config: GuardConfig,
        clock: Clock,
        suppress: Suppress | None = None,
    ) -> None:
        self.transport = transport
        self.booking = booking
        self.config = config
        self._clock = clock
        self._suppress: Suppress = suppress or (lambda _mail, _key, _hashed, _error: False)

    def send(self, mail: Prepared, admitted: Admitted, progress: Progress) -> Step | Refused:
        """``sent``, ``dropped`` / ``invalid`` (a message that fails to build), or the refusal."""
        base = mail.base if admitted.due is None else mail.base.but(due=admitted.due)
        try:
            envelope = envelope_of(mail.draft, message_of(mail))
        except InvalidMessage as exc:  # not expected: check_mail passed (needs_build_to_check)
            self.booking.release(mail)
            return Finish(base.but(reason=why.INVALID, detail=str(exc)))
        crash_point("admitted")
        try:
            receipt = self.transport.send(envelope)
        except (PermanentSendError, TransientSendError) as exc:
            tried = replace(progress, attempts=progress.attempts + exc.attempts)
            return Refused(exc, base, tried, mail)
        refused: tuple[dict[str, Any], ...] = ()
        if receipt.refused:
            key = self.booking.recipient_key
            refused = refusals(receipt, envelope, mail, key, self._suppress)
        outcome = base.but(
            status="sent",
            reason=why.PARTIAL if refused else None,
            refused=refused,
            attempts=progress.attempts + receipt.attempts,
            smtp_code=receipt.code,
            smtp_reply=receipt.reply,
            provider=receipt.provider,
            provider_message_id=receipt.provider_message_id,
            sent_at=self._clock(),
            admitted_at=admitted.admitted_at,
            detail=None if admitted.guarded else UNGUARDED,
        )
        log.info("mail %s sent to %s", mail.mail_id, base.recipient, extra=log_fields(outcome))
        for entry in refused:
            log.warning(
                "mail %s: recipient %s refused (%s %s)%s",
                mail.mail_id,
                entry["recipient"],
                entry["code"],
                entry["reply"],
                f", retried alone as {entry['retry']}" if entry["retry"] else "",
                extra=log_fields(outcome) | {"recipient": entry["recipient"]},
            )
        return Finish(outcome)

    def after_refusal(self, refused: Refused) -> Step:
        """A refusal no gate answered: ``failed`` (permanent), else retried with backoff, or
        ``dropped`` / ``expired`` when no try is left within the kind's lifetime."""
        exc, base, progress = refused.error, refused.base, refused.progress
        if isinstance(exc, PermanentSendError):
            failed = failure(base, why.SMTP_PERMANENT, progress.attempts, exc)
            log.warning(
                "mail %s failed: %s",
                base.mail_id,
                described(exc, "permanent"),
                extra=log_fields(failed.outcome),
            )
            return failed
        progress = replace(progress, send_failures=progress.send_failures + 1)
        kind = None if refused.mail is None else refused.mail.kind
        now = self._clock()
        wait = retry_wait(self.config, progress.send_failures)
        countdown = next_try(
            self.config, kind, progress, now, wait, min_gap=self.config.retry_backoff
        )
        if countdown is None:
            if refused.mail is not None:
                self.booking.release(refused.mail)  # never sent: its recipient keeps the slot
            done = expired(base, progress, exc, kind=kind, config=self.config, now=now)
            log.warning(
                "mail %s dropped: %s, its lifetime is over",
                base.mail_id,
                described(exc, "transient"),
                extra=log_fields(done.outcome),
            )
            return done
        waiting = base.but(
            status="deferred",
            reason=why.SMTP_TRANSIENT,
            attempts=progress.attempts,
            wait=countdown,
            smtp_code=exc.code,
            smtp_reply=exc.reply,
            provider=exc.provider,
        )
        log.info(
            "mail %s: %s, again in %s",
            base.mail_id,
            described(exc, "transient"),
            human(countdown),
            extra=log_fields(waiting),
        )
        return Later(countdown, waiting, progress)
