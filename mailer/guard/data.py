"""The guard's data: what a run is asked (:class:`MailRequest`), configured with
(:class:`GuardConfig`), and carries between its steps (:class:`Prepared`, :class:`Admitted`,
:class:`Refused`); and the small helpers that shape outcomes and log fields. Plain data, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.message import EmailMessage
from typing import Any

from mailer import defaults
from mailer.errors import InvalidMessage, PermanentSendError, SendError, TransientSendError
from mailer.mail.address import AddressRules
from mailer.mail.kinds import Kind
from mailer.mail.message import Mail
from mailer.outcomes import Outcome
from mailer.steps import Fail, Progress


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
    tenant: Any = None
    cc: Any = None
    bcc: Any = None
    reply_to: Any = None
    from_email: Any = None
    attachments: Any = None
    charset: Any = None
    mime: Any = None


@dataclass(frozen=True)
class GuardConfig:
    """The guard's knobs; durations in seconds. Defaults: :mod:`mailer.defaults`.

    Build it from the environment with :meth:`mailer.settings.Settings.guard_config`.
    """

    sender: str = defaults.SENDER
    fail_open: bool = False
    #: The longest backoff after runs that found a backend down (``MAILGUARD_MAX_COUNTDOWN``);
    #: a refused send's is ``retry_backoff_max``. The guard caps no countdown
    #: (``workers/tasks.py`` does).
    max_backoff: float = defaults.MAX_COUNTDOWN
    #: The first wait after a failed run (a refused send, a backend down), doubled each time.
    retry_backoff: float = defaults.RETRY_BACKOFF
    claim_lease: float = defaults.CLAIM_LEASE
    suppress_for: float = defaults.SUPPRESS_FOR
    late_tolerance: float = defaults.LATE_TOLERANCE
    #: A hold's length when the reply states none; None: no holds (throttling replies retried).
    throttle_hold: float | None = defaults.THROTTLE_HOLD
    #: The longest a hold grows by doubling.
    throttle_hold_max: float = defaults.THROTTLE_HOLD_MAX
    #: How long a greylisted mail waits when the reply states no delay.
    greylist_delay: float = defaults.GREYLIST_DELAY
    #: (distinct recipients, seconds): that many temporary failures hold the sender; None: off.
    hold_evidence: tuple[int, float] | None = defaults.HOLD_EVIDENCE
    rules: AddressRules = field(default_factory=AddressRules)
    #: How long a mail is kept through temporary failures when its kind sets no lifetime
    #: (``MAILGUARD_LIFETIME``; :func:`mailer.mail.kinds.lifetime_of`).
    lifetime: float = defaults.LIFETIME
    #: The longest wait between two tries of a mail the relay refused for a time
    #: (``MAILGUARD_RETRY_BACKOFF_MAX``).
    retry_backoff_max: float = defaults.RETRY_BACKOFF_MAX


@dataclass(frozen=True)
class Prepared:
    """A validated mail: what the later steps need. ``base`` is every result's starting point."""

    mail_id: str
    kind: Kind
    limit_key: str
    #: The checked mail (:func:`mailer.mail.message.check_mail`), built only when it is sent.
    draft: Mail
    base: Outcome
    #: The tenant the mail counts against (validated), None for none.
    tenant: str | None = None
    #: The limit keys of the message's other envelope recipients (to, cc, bcc after the
    #: first, deduplicated): each must have room too (:mod:`mailer.limits.multi`).
    more_keys: tuple[str, ...] = ()
    #: The message, when it was built already (to check it, or to change its recipients).
    message: EmailMessage | None = None
    #: When the mail was validated (epoch seconds): its ``Date``.
    built_at: float | None = None


@dataclass(frozen=True)
class Admitted:
    """The mail may be sent now. ``due`` is its slot (epoch seconds); ``guarded`` is False when
    the limiter was down and ``fail_open`` let the mail go without it (no slot to give back).
    ``admitted_at`` (epoch seconds on the limiter's clock, never before ``due``) is when the
    limiter admitted it: where the policy's spacing is promised; None when unguarded."""

    due: float | None
    guarded: bool = True
    admitted_at: float | None = None


@dataclass(frozen=True)
class Refused:
    """The transport refused the mail: what the gates' ``on_send_error`` hooks see.

    ``base`` is the outcome so far (with the slot in ``due``); ``progress`` already counts the
    SMTP attempts this send made; ``mail`` is the mail refused (None: not known, its kind's
    lifetime read as ``GuardConfig.lifetime``).
    """

    error: PermanentSendError | TransientSendError
    base: Outcome
    progress: Progress
    mail: Prepared | None = None


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="seconds")


def mapping(value: Any, name: str) -> Mapping[str, Any]:
    """``value`` as a mapping (None is empty); raises ``InvalidMessage`` naming ``name``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidMessage(f"{name} must be a mapping")
    return value


def log_fields(outcome: Outcome) -> dict[str, Any]:
    """A log record's structured fields (``extra=``): ids and outcome, never the address."""
    return {
        "mail_id": outcome.mail_id,
        "recipient": outcome.recipient,
        "kind": outcome.kind,
        "status": outcome.status,
        "reason": outcome.reason,
        "tier": outcome.tier,
    }


def failure(base: Outcome, reason: str, attempts: int, exc: SendError) -> Fail:
    return Fail(
        base.but(
            status="failed",
            reason=reason,
            attempts=attempts,
            smtp_code=exc.code,
            smtp_reply=exc.reply,
            provider=exc.provider,
            detail=exc.reason,
        )
    )
