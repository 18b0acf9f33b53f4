"""The guard: one run of one mail, from its raw request to a :data:`Step` the task carries out.

It validates, asks the ledger and the limiter, sends through the transport, and answers with
plain data: :class:`Finish` (sent or dropped), :class:`Fail`, or :class:`Later` (run again in
``countdown`` seconds). It never imports Celery; ``workers/tasks.py`` turns steps into Celery
calls (return, raise, retry with a countdown).
"""

from __future__ import annotations

import logging
import time
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
from mailer.metrics import UNGUARDED, UNKNOWN_KIND, Metrics, default_metrics
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
        metrics: Metrics | None = None,
    ) -> None:
        self.limiter = limiter
        self.ledger = ledger
        self.transport = transport
        self.kinds = kinds or Kinds.defaults()
        self.config = config or GuardConfig()
        self._clock = clock or system_clock
        #: Where each run is counted (:mod:`mailer.metrics`); ``NO_METRICS`` counts nothing.
        self.metrics = metrics if metrics is not None else default_metrics()

    def process(self, request: MailRequest, progress: Progress | None = None) -> Step:
        """One run of one mail. Never raises for bad input: that is a ``dropped`` outcome."""
        step, repeated = self._run(request, progress or Progress())
        kind = step.outcome.kind
        label = kind if kind in self.kinds else UNKNOWN_KIND
        if repeated:
            self.metrics.repeat(label)
        else:
            self.metrics.record(step.outcome, label)
        return step

    def _run(  # noqa: PLR0911, PLR0915 - one return per outcome reads best here
        self, request: MailRequest, progress: Progress
    ) -> tuple[Step, bool]:
        """The step, and whether the mail had already finished (a repeated run)."""
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
            dropped = base.but(reason=why.INVALID, detail=str(exc))
            log.info(
                "mail %s dropped: invalid input: %s", request.mail_id, exc, extra=_fields(dropped)
            )
            return Finish(dropped), False

        try:
            hashed = self.limiter.storage_key(recipient.limit_key)
        except ValueError as exc:
            return Finish(base.but(reason=why.INVALID, detail=str(exc))), False
        base = base.but(recipient=hashed, message_id=message_id(request.mail_id, mail.sender))

        # One atomic ledger step: already sent (return that), claimed by us, or held by another.
        owner = uuid.uuid4().hex
        try:
            begun = self.ledger.begin(request.mail_id, owner, self.config.claim_lease)
        except BackendUnavailable as exc:
            # Without the ledger no run can promise "once": defer, whatever the fail mode.
            self.metrics.backend_down("ledger")
            return self._limiter_down(base, progress, exc), False
        if isinstance(begun, Outcome):
            log.info(
                "mail %s already %s; nothing sent again",
                request.mail_id,
                begun.status,
                extra=_fields(begun),
            )
            return Finish(begun), True
        if not begun:
            waiting = base.but(status="deferred", reason=why.IN_FLIGHT, wait=IN_FLIGHT_WAIT)
            log.info(
                "mail %s is being sent by another run; checking again later",
                request.mail_id,
                extra=_fields(waiting),
            )
            return Later(IN_FLIGHT_WAIT, waiting, progress), False
        try:
            started = time.perf_counter()
            decision = self.limiter.acquire(
                recipient.limit_key, mail_id=request.mail_id, max_wait=min(kind.max_wait, 7 * 86400)
            )
            self.metrics.decision(time.perf_counter() - started)
        except BackendUnavailable as exc:
            self.metrics.backend_down("limiter")
            if not self.config.fail_open:
                self._unclaim(request.mail_id, owner)
                return self._limiter_down(base, progress, exc), False
            log.warning(
                "mail %s: limiter unavailable, sending unguarded (fail_open)",
                request.mail_id,
                extra=_fields(base),
            )
            return self._send(
                request.mail_id,
                recipient.limit_key,
                owner,
                message,
                base=base,
                progress=progress,
                guarded=False,
            ), False

        step = plan(decision, max_countdown=self.config.max_countdown)
        if not isinstance(step, Send):
            self._unclaim(request.mail_id, owner)
        if isinstance(step, Drop):
            tier = str(step.tier) if step.tier else None
            dropped = base.but(reason=why.RATE_LIMITED, tier=tier, wait=step.wait, due=decision.at)
            log.info(
                "mail %s dropped: rate limited by %s, wait %.3f s",
                request.mail_id,
                tier,
                step.wait,
                extra=_fields(dropped),
            )
            return Finish(dropped), False
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
            ), False
        # due: the slot this mail holds (now, or the booking it woke up for)
        return self._send(
            request.mail_id,
            recipient.limit_key,
            owner,
            message,
            base=base.but(due=step.at),
            progress=progress,
            guarded=True,
        ), False

    def _limiter_down(self, base: Outcome, progress: Progress, exc: Exception) -> Step:
        progress = replace(progress, limiter_failures=progress.limiter_failures + 1)
        countdown = min(
            self.config.retry_backoff * 2 ** (progress.limiter_failures - 1),
            self.config.max_countdown,
        )
        waiting = base.but(
            status="deferred", reason=why.LIMITER_UNAVAILABLE, wait=countdown, detail=str(exc)
        )
        log.warning(
            "mail %s deferred %.1f s: limiter unavailable (fail_closed)",
            base.mail_id,
            countdown,
            extra=_fields(waiting),
        )
        return Later(countdown, waiting, progress)

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
            failed = _failed(base, why.SMTP_PERMANENT, progress.attempts + exc.attempts, exc)
            log.warning(
                "mail %s failed: permanent SMTP error %s",
                mail_id,
                exc.code,
                extra=_fields(failed.outcome),
            )
            return failed
        except TransientSendError as exc:
            attempts = progress.attempts + exc.attempts
            progress = replace(
                progress, attempts=attempts, send_failures=progress.send_failures + 1
            )
            if progress.send_failures > self.config.send_retries:
                self._give_back(mail_id, limit_key, owner, guarded)
                failed = _failed(base, why.RETRIES_EXHAUSTED, attempts, exc)
                log.warning(
                    "mail %s failed: transient SMTP errors, retries exhausted",
                    mail_id,
                    extra=_fields(failed.outcome),
                )
                return failed
            self._unclaim(mail_id, owner)
            countdown = min(
                self.config.retry_backoff * 2 ** (progress.send_failures - 1),
                self.config.max_countdown,
            )
            waiting = base.but(
                status="deferred",
                reason=why.SMTP_TRANSIENT,
                attempts=attempts,
                wait=countdown,
                smtp_code=exc.code,
                smtp_reply=exc.reply,
            )
            log.info(
                "mail %s: transient SMTP error %s, again in %.1f s",
                mail_id,
                exc.code,
                countdown,
                extra=_fields(waiting),
            )
            return Later(countdown, waiting, progress)
        outcome = base.but(
            status="sent",
            reason=None,
            attempts=progress.attempts + receipt.attempts,
            smtp_code=receipt.code,
            smtp_reply=receipt.reply,
            sent_at=self._clock(),
            detail=None if guarded else UNGUARDED,
        )
        try:
            self.ledger.record(outcome)
        except BackendUnavailable:
            # The mail is out; only the marker is missing. A redelivered copy would find the
            # claim (until its lease ends): log loudly rather than fail a sent mail.
            self.metrics.backend_down("ledger")
            log.error(
                "mail %s sent but its outcome could not be recorded",
                mail_id,
                extra=_fields(outcome),
            )
        log.info("mail %s sent to %s", mail_id, base.recipient, extra=_fields(outcome))
        return Finish(outcome)

    def _give_back(self, mail_id: str, limit_key: str, owner: str, guarded: bool) -> None:
        """A mail failed for good: the recipient should not pay for our failure."""
        if guarded:
            try:
                self.limiter.release(limit_key, mail_id)
            except BackendUnavailable:
                self.metrics.backend_down("limiter")
                log.warning(
                    "mail %s: could not release its slot (limiter unavailable)",
                    mail_id,
                    extra={"mail_id": mail_id},
                )
        self._unclaim(mail_id, owner)

    def _unclaim(self, mail_id: str, owner: str) -> None:
        try:
            self.ledger.unclaim(mail_id, owner)
        except BackendUnavailable:
            self.metrics.backend_down("ledger")
            log.warning(
                "mail %s: claim left to expire (ledger unavailable)",
                mail_id,
                extra={"mail_id": mail_id},
            )


def _fields(outcome: Outcome) -> dict[str, Any]:
    """A log record's structured fields (``extra=``): ids and outcome, never the address."""
    return {
        "mail_id": outcome.mail_id,
        "recipient": outcome.recipient,
        "kind": outcome.kind,
        "status": outcome.status,
        "reason": outcome.reason,
        "tier": outcome.tier,
    }


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
