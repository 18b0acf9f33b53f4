"""The guard: one run of one mail, from its raw request to a :data:`Step` the task carries out.

It validates, asks the ledger and the limiter, sends through the transport, and answers with
plain data: :class:`Finish` (sent or dropped), :class:`Fail`, or :class:`Later` (run again in
``countdown`` seconds). It never imports Celery; ``workers/tasks.py`` turns steps into Celery
calls (return, raise, retry with a countdown).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mailer import outcomes as why
from mailer.address import AddressRules, normalise_address
from mailer.clock import Clock, system_clock
from mailer.errors import (
    BackendUnavailable,
    InvalidAddress,
    InvalidMessage,
    PermanentSendError,
    SendError,
    TransientSendError,
)
from mailer.kinds import Kinds, render
from mailer.ledger import Ledger
from mailer.limiter import Limiter
from mailer.message import Mail, build_message, message_id
from mailer.outcomes import Outcome
from mailer.plan import Defer, Drop, Send, plan
from mailer.transports.base import Transport

log = logging.getLogger("mailguard")

#: Wait when another worker holds the claim on the same mail, in seconds.
IN_FLIGHT_WAIT = 5.0


@dataclass(frozen=True)
class MailRequest:
    """What ``send_mail`` was called with. Nothing here is trusted: the guard validates it."""

    to: Any
    mail_id: str
    subject: Any = None
    body: Any = None
    html: Any = None
    kind: Any = "default"
    context: Any = None
    headers: Any = None


@dataclass(frozen=True)
class Progress:
    """Counters carried from one run of a mail to the next (JSON-ready via ``as_dict``)."""

    attempts: int = 0  # SMTP tries so far
    send_failures: int = 0  # runs that ended in a transient send failure
    limiter_failures: int = 0  # runs that found the limiter down
    deferrals: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "attempts": self.attempts,
            "send_failures": self.send_failures,
            "limiter_failures": self.limiter_failures,
            "deferrals": self.deferrals,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Progress:
        if not isinstance(data, Mapping):
            return cls()
        return cls(
            **{
                k: int(data.get(k, 0))
                for k in ("attempts", "send_failures", "limiter_failures", "deferrals")
            }
        )


@dataclass(frozen=True)
class Finish:
    """Done for good: ``outcome.status`` is ``sent`` or ``dropped``."""

    outcome: Outcome


@dataclass(frozen=True)
class Fail:
    """Failed for good (``failed``): a permanent SMTP error or retries exhausted."""

    outcome: Outcome


@dataclass(frozen=True)
class Later:
    """Run this mail again in ``countdown`` seconds with ``progress``; ``outcome`` says why."""

    countdown: float
    outcome: Outcome
    progress: Progress


Step = Finish | Fail | Later


@dataclass
class GuardConfig:
    """The guard's knobs; durations in seconds (see :mod:`mailer.settings`)."""

    sender: str = "mailguard@localhost"
    fail_open: bool = False
    max_countdown: float = 600.0
    send_retries: int = 5
    retry_backoff: float = 30.0
    claim_lease: float = 300.0
    rules: AddressRules = field(default_factory=AddressRules)


class Guard:
    """Carries one mail through validate, ledger, limiter, send. Thread-safe if its parts are."""

    def __init__(
        self,
        limiter: Limiter,
        ledger: Ledger,
        transport: Transport,
        *,
        kinds: Kinds | None = None,
        config: GuardConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.limiter = limiter
        self.ledger = ledger
        self.transport = transport
        self.kinds = kinds or Kinds.defaults()
        self.config = config or GuardConfig()
        self._clock = clock or system_clock

    def process(  # noqa: PLR0911 - one return per outcome reads best here
        self, request: MailRequest, progress: Progress | None = None
    ) -> Step:
        """One run of one mail. Never raises for bad input: that is a ``dropped`` outcome."""
        progress = progress or Progress()
        now = self._clock()
        kind_name = request.kind if isinstance(request.kind, str) else "?"
        base = Outcome(
            status="dropped",
            mail_id=request.mail_id,
            kind=kind_name,
            attempts=progress.attempts,
            deferrals=progress.deferrals,
            decided_at=now,
        )
        try:
            recipient = normalise_address(request.to, self.config.rules)
            kind = self.kinds[kind_name]
            context = request.context if request.context is not None else {}
            if not isinstance(context, Mapping):
                raise InvalidMessage("context must be a mapping")
            headers = request.headers if request.headers is not None else {}
            if not isinstance(headers, Mapping):
                raise InvalidMessage("headers must be a mapping")
            subject, body, html = render(
                kind,
                request.subject,
                request.body,
                request.html,
                context,
            )
            mail = Mail(
                to=recipient.address,
                subject=subject,
                body=body,
                html=html,
                mail_id=request.mail_id,
                sender=self.config.sender,
                headers=headers,
            )
            message = build_message(mail, now=now)
        except (InvalidAddress, InvalidMessage) as exc:
            log.info("mail %s dropped: invalid input: %s", request.mail_id, exc)
            return Finish(base.but(reason=why.INVALID, detail=str(exc)))

        try:
            hashed = self.limiter.storage_key(recipient.limit_key)
        except ValueError as exc:
            return Finish(base.but(reason=why.INVALID, detail=str(exc)))
        base = base.but(recipient=hashed, message_id=message_id(request.mail_id, mail.sender))

        # One atomic ledger step: already sent (return that), claimed by us, or held by another.
        owner = uuid.uuid4().hex
        try:
            begun = self.ledger.begin(request.mail_id, owner, self.config.claim_lease)
        except BackendUnavailable as exc:
            # Without the ledger no run can promise "once": defer, whatever the fail mode.
            return self._limiter_down(base, progress, exc)
        if isinstance(begun, Outcome):
            log.info("mail %s already %s; nothing sent again", request.mail_id, begun.status)
            return Finish(begun)
        if not begun:
            log.info("mail %s is being sent by another run; checking again later", request.mail_id)
            return Later(
                IN_FLIGHT_WAIT,
                base.but(status="deferred", reason=why.IN_FLIGHT, wait=IN_FLIGHT_WAIT),
                progress,
            )
        try:
            decision = self.limiter.acquire(
                recipient.limit_key, mail_id=request.mail_id, max_wait=min(kind.max_wait, 7 * 86400)
            )
        except BackendUnavailable as exc:
            if not self.config.fail_open:
                self._unclaim(request.mail_id, owner)
                return self._limiter_down(base, progress, exc)
            log.warning(
                "mail %s: limiter unavailable, sending unguarded (fail_open)", request.mail_id
            )
            return self._send(
                request.mail_id,
                recipient.limit_key,
                owner,
                message,
                base=base,
                progress=progress,
                guarded=False,
            )

        step = plan(decision, max_countdown=self.config.max_countdown)
        if not isinstance(step, Send):
            self._unclaim(request.mail_id, owner)
        if isinstance(step, Drop):
            tier = str(step.tier) if step.tier else None
            log.info(
                "mail %s dropped: rate limited by %s, wait %.3f s", request.mail_id, tier, step.wait
            )
            return Finish(
                base.but(reason=why.RATE_LIMITED, tier=tier, wait=step.wait, due=decision.at)
            )
        if isinstance(step, Defer):
            tier = str(step.tier) if step.tier else None
            progress = replace(progress, deferrals=progress.deferrals + 1)
            return Later(
                step.countdown,
                base.but(
                    status="deferred",
                    reason=why.BOOKED,
                    tier=tier,
                    wait=step.wait,
                    due=step.due,
                    deferrals=progress.deferrals,
                ),
                progress,
            )
        # due: the slot this mail holds (now, or the booking it woke up for)
        return self._send(
            request.mail_id,
            recipient.limit_key,
            owner,
            message,
            base=base.but(due=step.at),
            progress=progress,
            guarded=True,
        )

    def _limiter_down(self, base: Outcome, progress: Progress, exc: Exception) -> Step:
        progress = replace(progress, limiter_failures=progress.limiter_failures + 1)
        countdown = min(
            self.config.retry_backoff * 2 ** (progress.limiter_failures - 1),
            self.config.max_countdown,
        )
        log.warning(
            "mail %s deferred %.1f s: limiter unavailable (fail_closed)", base.mail_id, countdown
        )
        return Later(
            countdown,
            base.but(
                status="deferred", reason=why.LIMITER_UNAVAILABLE, wait=countdown, detail=str(exc)
            ),
            progress,
        )

    def _send(
        self,
        mail_id: str,
        limit_key: str,
        owner: str,
        message: Any,
        *,
        base: Outcome,
        progress: Progress,
        guarded: bool,
    ) -> Step:
        """Send under the claim ``owner`` holds; record, retry later, or fail for good."""
        try:
            receipt = self.transport.send(message)
        except PermanentSendError as exc:
            self._give_back(mail_id, limit_key, owner, guarded)
            log.warning("mail %s failed: permanent SMTP error %s", mail_id, exc.code)
            return _failed(base, why.SMTP_PERMANENT, progress.attempts + exc.attempts, exc)
        except TransientSendError as exc:
            attempts = progress.attempts + exc.attempts
            progress = replace(
                progress, attempts=attempts, send_failures=progress.send_failures + 1
            )
            if progress.send_failures > self.config.send_retries:
                self._give_back(mail_id, limit_key, owner, guarded)
                log.warning("mail %s failed: transient SMTP errors, retries exhausted", mail_id)
                return _failed(base, why.RETRIES_EXHAUSTED, attempts, exc)
            self._unclaim(mail_id, owner)
            countdown = min(
                self.config.retry_backoff * 2 ** (progress.send_failures - 1),
                self.config.max_countdown,
            )
            log.info(
                "mail %s: transient SMTP error %s, again in %.1f s", mail_id, exc.code, countdown
            )
            return Later(
                countdown,
                base.but(
                    status="deferred",
                    reason=why.SMTP_TRANSIENT,
                    attempts=attempts,
                    wait=countdown,
                    smtp_code=exc.code,
                    smtp_reply=exc.reply,
                ),
                progress,
            )
        outcome = base.but(
            status="sent",
            reason=None,
            attempts=progress.attempts + receipt.attempts,
            smtp_code=receipt.code,
            smtp_reply=receipt.reply,
            sent_at=self._clock(),
            detail=None if guarded else "sent unguarded",
        )
        try:
            self.ledger.record(outcome)
        except BackendUnavailable:
            # The mail is out; only the marker is missing. A redelivered copy would find the
            # claim (until its lease ends): log loudly rather than fail a sent mail.
            log.error("mail %s sent but its outcome could not be recorded", mail_id)
        log.info("mail %s sent to %s", mail_id, base.recipient)
        return Finish(outcome)

    def _give_back(self, mail_id: str, limit_key: str, owner: str, guarded: bool) -> None:
        """A mail failed for good: the recipient should not pay for our failure."""
        if guarded:
            try:
                self.limiter.release(limit_key, mail_id)
            except BackendUnavailable:
                log.warning("mail %s: could not release its slot (limiter unavailable)", mail_id)
        self._unclaim(mail_id, owner)

    def _unclaim(self, mail_id: str, owner: str) -> None:
        try:
            self.ledger.unclaim(mail_id, owner)
        except BackendUnavailable:
            log.warning("mail %s: claim left to expire (ledger unavailable)", mail_id)


def _failed(base: Outcome, reason: str, attempts: int, exc: SendError) -> Fail:
    return Fail(
        base.but(
            status="failed",
            reason=reason,
            attempts=attempts,
            smtp_code=exc.code,
            smtp_reply=exc.reply,
            detail=exc.reason,
        )
    )
