"""mailguard: exact multi-tier rate limits per recipient for outbound mail.

The library part: it never imports Celery (``workers`` wires it into Celery).
"""

from mailer.clock import Clock, ManualClock, system_clock
from mailer.decision import Decision
from mailer.errors import BackendUnavailable, MailguardError
from mailer.limiter import Limiter
from mailer.policy import REFERENCE_POLICY, Policy, Tier

__all__ = [
    "REFERENCE_POLICY",
    "BackendUnavailable",
    "Clock",
    "Decision",
    "Limiter",
    "MailguardError",
    "ManualClock",
    "Policy",
    "Tier",
    "system_clock",
]
