"""The options of an SMTP URL (``smtp://``, ``smtps://``, ``smtp+starttls://``; ``?starttls=1``,
``?timeout=10``): how :meth:`mailer.mail.transports.smtp.SmtpTransport.from_url` reads them."""

from __future__ import annotations

from typing import Literal
from urllib.parse import parse_qsl

Security = Literal["plain", "ssl", "starttls"]

#: Each scheme's security and default port.
SCHEMES: dict[str, tuple[Security, int]] = {
    "smtp": ("plain", 25),
    "smtps": ("ssl", 465),
    "smtp+starttls": ("starttls", 587),
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def url_options(query: str, security: Security, shown: str) -> tuple[Security, float]:
    """The SMTP URL's ``starttls`` and ``timeout`` options: (security, timeout in seconds)."""
    timeout = 30.0
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == "starttls":
            if value.lower() in _TRUE:
                if security == "ssl":
                    raise ValueError(f"bad SMTP URL {shown}: smtps already uses TLS, drop starttls")
                security = "starttls"
            elif value.lower() not in _FALSE:
                raise ValueError(f"bad SMTP URL {shown}: starttls must be 1 or 0")
        elif key == "timeout":
            try:
                timeout = float(value)
            except ValueError:
                raise ValueError(f"bad SMTP URL {shown}: timeout must be seconds") from None
            if not 0 < timeout < float("inf"):
                raise ValueError(f"bad SMTP URL {shown}: timeout must be positive seconds")
        else:
            raise ValueError(f"bad SMTP URL {shown}: unknown option {key!r} (starttls, timeout)")
    return security, timeout
