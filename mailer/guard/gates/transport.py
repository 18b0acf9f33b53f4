"""The transport gate: when the relay refuses our own side, hold the transport, not the mail.

A refusal whose reaction is ``HOLD_TRANSPORT`` (:func:`mailer.mail.replies.reaction_of`:
authentication refused or required, a certificate or TLS handshake refused, the relay refusing
our sender or our relaying) would meet every mail alike: the transport's hold starts
(:mod:`mailer.records.holds.transport`), the mail is booked after it (``deferred`` / ``held``,
``hold`` ``transport``), and the worker that wrote the hold logs one ERROR line (the others,
refused at the same time, only book their mails). Before admission every mail meets the hold:
while it is in force the mail is booked after it, opening no SMTP transaction; once its time
has passed, the first mail to come is the probe (the others are booked after the next probe's
time); the relay accepting a mail (:meth:`TransportGate.on_sent`) lifts the hold. ``mailguard
transport resume`` lifts it at once.

Before the holds gate (a transient TLS refusal must not hold the sender). A holds store that is
down is the limiter down, as for the holds gate. Use only with holds on.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from mailer import outcomes as why
from mailer.errors import BackendUnavailable
from mailer.guard.booking import After, Booking
from mailer.guard.data import Admitted, GuardConfig, Prepared, Refused, iso, log_fields
from mailer.guard.gates import Reads
from mailer.guard.outage import backend_down
from mailer.mail.replies import Action, reaction_of, sender_refused
from mailer.metrics import Metrics
from mailer.outcomes import Outcome
from mailer.records.holds import TRANSPORT, Hold, TransportHold
from mailer.records.holds.base import decode_hold
from mailer.steps import Finish, Progress, Step

log = logging.getLogger("mailguard")


class TransportGate:
    """Books mails after the transport's hold, lets one probe through when its time has passed,
    starts the hold on a ``HOLD_TRANSPORT`` refusal and lifts it when a mail is sent."""

    def __init__(
        self, hold: TransportHold, booking: Booking, config: GuardConfig, metrics: Metrics
    ) -> None:
        self.hold = hold
        self.booking = booking
        self.config = config
        self.metrics = metrics
        # The mail id this thread sends as the probe, and the hold it probes (None: the relay's).
        self._probe = threading.local()

    def reads(self, mail: Prepared) -> Reads | None:
        client = self.hold.shared_client()
        keys = [self.hold.key_for(None), self.hold.key_for(_sender(mail))]
        return None if client is None else (client, keys)

    def before_admit(
        self, mail: Prepared, progress: Progress, raws: list[Any] | None
    ) -> Prepared | Admitted | Step:
        """No hold: ``mail`` goes on. A hold in force: the mail booked after it. A hold whose
        time has passed: the first mail to ask goes on as the probe, the others are booked
        after the next probe's time. A mail whose deadline comes first goes on."""
        self._probe.mail = None
        try:
            stored = self._stored(mail, raws)
        except BackendUnavailable as exc:
            self.metrics.backend_down("limiter")
            if self.config.fail_open:
                return mail
            return backend_down(self.config, mail.base, progress, exc, why.LIMITER_UNAVAILABLE)
        if stored is None or stored.written or (progress.due and progress.due >= stored.until):
            return mail  # no hold, this mail is the probe, or it is booked after the hold
        if progress.due:
            window = self.booking.window(mail, progress)
            if isinstance(window, Finish):
                return window
            now, max_wait = window
            if now + max_wait < stored.until:
                return mail  # booked before its deadline: it cannot wait the hold out
        after = After(TRANSPORT, stored)
        return self.booking.after_hold(mail, mail.base, progress, after, holds_slot=False)

    def _stored(self, mail: Prepared, raws: list[Any] | None) -> Hold | None:
        """The transport hold ``mail`` meets (the relay's, else its sender's): None, the one in
        force, or (its time passed) the one this mail's probe claim wrote (``written``: it is
        the probe) or found."""
        sender = _sender(mail)
        if raws:
            relay, own = decode_hold(raws[0]), decode_hold(raws[1])
        else:
            relay, own = self.hold.current(), self.hold.current(sender) if sender else None
        scope, stored = (None, relay) if relay is not None else (sender, own)
        if stored is None or stored.until > self.hold.now():
            return stored
        stored = self.hold.claim(scope)
        if stored is not None and stored.written:
            self._probe.mail, self._probe.scope = mail.mail_id, scope
            log.warning(
                "transport probe: mail %s tries the relay%s (the next probe, if it is refused, "
                "at %s)",
                mail.mail_id,
                f" for sender {scope}" if scope else "",
                iso(stored.until),
                extra=log_fields(mail.base) | {"hold": TRANSPORT},
            )
        return stored

    def on_send_error(self, mail: Prepared, refused: Refused) -> Admitted | Step | None:
        """A ``HOLD_TRANSPORT`` refusal: the transport held (one ERROR line from the worker
        that wrote the hold; a WARNING from a refused probe), the mail booked after it. Other
        refusals: None."""
        exc, progress = refused.error, refused.progress
        if reaction_of(exc).action is not Action.HOLD_TRANSPORT:
            return None
        base = refused.base.but(
            attempts=progress.attempts,
            smtp_code=exc.code,
            smtp_reply=exc.reply or exc.reason,
            provider=exc.provider,
        )
        cause = f"{exc.code or ''} {exc.reply or exc.reason}".strip()
        scope = _sender(mail) if sender_refused(exc.reply or "") else None
        try:
            hold = self.hold.start(cause, scope)
        except BackendUnavailable as down:
            self.metrics.backend_down("limiter")
            self.booking.release(mail)
            return backend_down(self.config, base, progress, down, why.LIMITER_UNAVAILABLE)
        self._told(mail, hold, cause, base, scope)
        after = After(TRANSPORT, hold)
        return self.booking.after_hold(mail, base, progress, after, holds_slot=True)

    def on_sent(self, mail: Prepared, step: Step) -> None:
        """The relay accepted ``mail``: when it was this thread's probe, lift the hold."""
        if getattr(self._probe, "mail", None) != mail.mail_id or step.outcome.status != "sent":
            return
        self._probe.mail = None
        try:
            lifted = self.hold.lift(getattr(self._probe, "scope", None))
        except BackendUnavailable:
            self.metrics.backend_down("limiter")
            return  # the next probe lifts it
        if lifted:
            log.warning(
                "transport hold lifted: the relay accepted mail %s",
                mail.mail_id,
                extra=log_fields(step.outcome) | {"hold": TRANSPORT},
            )

    def _told(
        self, mail: Prepared, hold: Hold, cause: str, base: Outcome, scope: str | None
    ) -> None:
        """Log the hold once: ERROR from the refusal that wrote it, WARNING from a probe."""
        fields = log_fields(base) | {"hold": TRANSPORT, "until": hold.until, "level": hold.level}
        if hold.written:
            self.metrics.hold(TRANSPORT, _label(cause))
            log.error(
                "transport held: the relay refuses our own side (%s); every mail%s waits, the "
                "relay is probed with one mail from %s; fix the relay settings and restart the "
                "workers, or run 'mailguard transport resume'",
                cause,
                f" from {scope}" if scope else "",
                iso(hold.until),
                extra=fields,
            )
        elif getattr(self._probe, "mail", None) == mail.mail_id:
            self._probe.mail = None
            log.warning(
                "transport probe refused (%s); every mail waits until the next probe at %s",
                cause,
                iso(hold.until),
                extra=fields,
            )


def _sender(mail: Prepared) -> str | None:
    """``mail``'s sender as its From is written (``Shop <orders@example.org>``), lower case, as
    the reputation names it (not parsed again); None without one."""
    return (mail.draft.sender or "").strip().lower() or None


def _label(cause: str) -> str:
    """A bounded metrics label: the refusal's code (``535``), or ``tls`` / ``other`` without."""
    head = cause.split(maxsplit=1)[0] if cause else ""
    if head.isdigit():
        return head
    return "tls" if "SSL" in cause or "certificate" in cause else "other"
