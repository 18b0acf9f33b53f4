"""Public path of :mod:`mailer.limits.precheck` (a web form's "may I send now?")."""

from mailer.limits.precheck import BAD_REQUEST, OK, TOO_MANY_REQUESTS, precheck

__all__ = ["BAD_REQUEST", "OK", "TOO_MANY_REQUESTS", "precheck"]
