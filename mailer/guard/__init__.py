"""The guard: one run of one mail, validate → claim → gates → admit → send → settle."""

from mailer.guard.corecipients import copies
from mailer.guard.data import iso
from mailer.guard.engine import Fail, Finish, Guard, GuardConfig, Later, MailRequest, Progress, Step

__all__ = [
    "Fail",
    "Finish",
    "Guard",
    "GuardConfig",
    "Later",
    "MailRequest",
    "Progress",
    "Step",
    "copies",
    "iso",
]
