"""The guard: one run of one mail, validate → claim → gates → admit → send → settle."""

from mailer.guard.engine import Fail, Finish, Guard, GuardConfig, Later, MailRequest, Progress, Step

__all__ = ["Fail", "Finish", "Guard", "GuardConfig", "Later", "MailRequest", "Progress", "Step"]
