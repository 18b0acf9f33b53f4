"""The few exceptions a caller of mailguard can act on. Each message says what to do."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


class MailguardError(Exception):
    """Base class of every error mailguard raises on purpose."""


class BackendUnavailable(MailguardError):
    """The limiter's storage (Redis) cannot be reached or answered with an error.

    Raised instead of the driver's own exceptions so callers catch one type. The URL in the
    message has its password masked. Decide with ``fail_closed`` / ``fail_open`` what a send
    does meanwhile; the limiter itself never guesses.
    """

    def __init__(self, url: str, cause: BaseException | None = None) -> None:
        self.url = mask_url(url)
        detail = f": {cause}" if cause is not None else ""
        super().__init__(
            f"limiter backend {self.url} is unavailable{detail}; check that the server runs and "
            "the URL is right"
        )


def mask_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***`` (safe for logs and messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable url>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
