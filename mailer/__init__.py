"""mailguard: exact multi-tier rate limits per recipient for outbound mail.

The library part: it never imports Celery (``workers`` wires it into Celery).
"""

from mailer.clock import Clock, ManualClock, system_clock
from mailer.durations import parse_duration
from mailer.errors import (
    BackendUnavailable,
    Contended,
    InvalidAddress,
    InvalidMessage,
    MailguardError,
    NotEnqueued,
    PermanentSendError,
    SendError,
    TransientSendError,
)
from mailer.limits.decision import Decision
from mailer.limits.limiter import Limiter
from mailer.limits.policy import REFERENCE_POLICY, Policy, Tier
from mailer.mail.address import AddressRules, Recipient, normalise_address
from mailer.mail.kinds import Kind, Kinds, render
from mailer.mail.message import Mail, build_message

__all__ = [
    "REFERENCE_POLICY",
    "AddressRules",
    "BackendUnavailable",
    "Clock",
    "Contended",
    "Decision",
    "InvalidAddress",
    "InvalidMessage",
    "Kind",
    "Kinds",
    "Limiter",
    "Mail",
    "MailguardError",
    "ManualClock",
    "NotEnqueued",
    "PermanentSendError",
    "Policy",
    "Recipient",
    "SendError",
    "Tier",
    "TransientSendError",
    "build_message",
    "normalise_address",
    "parse_duration",
    "render",
    "system_clock",
]
