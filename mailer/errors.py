"""The few exceptions a caller of mailguard can act on. Each message says what to do."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from mailer.mail.replies import Reaction


class MailguardError(Exception):
    """Base class of every error mailguard raises on purpose."""


class BackendUnavailable(MailguardError):
    """A backend's storage (Redis) cannot be reached or answered with an error.

    ``backend`` names which one is down: ``"limiter"`` (the rate limits) or ``"ledger"`` (claims
    and sent mails); the message starts with it, e.g. "ledger backend redis://... is
    unavailable". Raised instead of the driver's own exceptions so callers catch one type. The
    URL in the message (and ``url``) has its password masked. Decide with ``fail_closed`` /
    ``fail_open`` what a send does meanwhile; neither backend ever guesses.
    """

    def __init__(
        self, url: str, cause: BaseException | None = None, *, backend: str = "limiter"
    ) -> None:
        self.url = mask_url(url)
        self.backend = backend
        detail = f": {cause}" if cause is not None else ""
        super().__init__(
            f"{backend} backend {self.url} is unavailable{detail}; check that the server runs "
            "and the URL is right"
        )

    def __reduce__(self) -> tuple[object, ...]:
        # Keep the message, url and backend when the error is pickled (result backends,
        # processes): the default would call __init__ with the message as the URL.
        return (_restore_unavailable, (type(self), str(self), self.url, self.backend))


class Contended(MailguardError):
    """A message to several recipients found no common slot in a bounded number of rounds
    (other mails kept moving its recipients' slots). Nothing is held: try again after a short
    backoff. Never a reason to send unguarded, whatever ``fail_open`` says: the limiter works.
    """


def _restore_unavailable(
    cls: type[BackendUnavailable], message: str, url: str, backend: str
) -> BackendUnavailable:
    error = cls.__new__(cls)
    MailguardError.__init__(error, message)
    error.url = url
    error.backend = backend
    return error


def mask_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***`` (safe for logs and messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable url>"
    if parts.password is None:
        return url
    user = parts.username or ""
    netloc = f"{user}:***@{parts.netloc.rpartition('@')[2]}"  # host and port as written
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class InvalidAddress(MailguardError, ValueError):
    """A recipient address that cannot be used: drop the mail, retrying never helps.

    The message says what is wrong (e.g. "domain part is empty") and never repeats the address,
    so it is safe for logs.
    """


class InvalidMessage(MailguardError, ValueError):
    """A mail that cannot be built: a bad header, a too long body, a template that fails.

    The message names the field but never repeats its content. Retrying never helps: fix the
    caller or the template.
    """


class UnknownKind(InvalidMessage, KeyError):
    """A mail kind that no registry knows. Also a ``KeyError``, so ``Kinds`` is a true mapping."""

    def __str__(self) -> str:
        # KeyError would show the repr of its argument; the message is already readable.
        return str(self.args[0]) if self.args else ""


class SendError(MailguardError):
    """The transport could not hand the mail over.

    ``code`` is the last SMTP reply code (``None`` when no reply came, e.g. connection refused),
    ``reply`` the reply text with recipient addresses masked, ``attempts`` how many times the
    transport tried. Subclasses tell whether another try later may succeed. ``reaction`` is
    what a transport that knows its provider's answer asks for (an API's throttling error holds
    the sender); None: the guard reads ``code`` and ``reply``
    (:func:`mailer.mail.replies.reaction_of`). ``provider`` names the provider an API
    transport reached (``postmark``, ``ses``; None for SMTP): ``reply`` is then its answer.
    """

    advice = "see the reply"
    reaction: Reaction | None = None
    provider: str | None = None

    def __init__(
        self,
        reason: str,
        *,
        code: int | None = None,
        reply: str = "",
        attempts: int = 1,
        reaction: Reaction | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code
        self.reply = reply
        self.attempts = attempts
        self.reaction = reaction

    def __str__(self) -> str:
        reply = f" (SMTP {self.code} {self.reply!r})" if self.code is not None else ""
        if self.code is None and self.reply:
            reply = f" ({self.reply!r})"
        plural = "" if self.attempts == 1 else "s"
        return f"{self.reason}{reply} after {self.attempts} attempt{plural}; {self.advice}"

    def __reduce__(self) -> tuple[object, ...]:
        # Keep code, reply and attempts when the error is pickled (result backends, processes).
        state = {
            "code": self.code,
            "reply": self.reply,
            "attempts": self.attempts,
            "reaction": self.reaction,
            "provider": self.provider,
        }
        return (type(self), (self.reason,), state)


class TransientSendError(SendError):
    """The server deferred the mail (4xx), dropped the connection or timed out, and the
    transport's retries ran out. Sending again later may succeed.

    Caveat: a connection lost right after the message data was sent leaves it unknown whether
    the server kept the mail; a later try may then deliver it twice.
    """

    advice = "try again later"


class PermanentSendError(SendError):
    """The server refused the mail for good (5xx) or the transport is misconfigured.

    Never retry: the same mail would be refused again.
    """

    advice = "do not retry; fix the address, the message or the transport settings"


class CorruptState(MailguardError):
    """A limiter key holds data mailguard did not write there (another program's, a damaged
    value, or more entries than ``MAILGUARD_MAX_BOOKINGS`` allows): refused, never decoded as
    a backlog. The message names the scope and the key's hashed name (never a recipient in
    clear); delete that key (its scope then starts empty) or raise the bound it names.
    """


class NotEnqueued(MailguardError):
    """``send_mail.delay`` could not reach the broker or the result backend within
    ``MAILGUARD_ENQUEUE_TIMEOUT``: the mail was **not** enqueued and nothing of it is kept to
    send later, so calling again (once the server is back) is safe and sends it once.

    ``part`` names what was unreachable (``"broker"`` or ``"result backend"``), ``url`` its URL
    with the password masked; the message says both. Also raised by Django's backend
    (``workers.django``) unless ``fail_silently``.
    """

    def __init__(self, part: str, url: str, cause: BaseException | None = None) -> None:
        self.part = part
        self.url = mask_url(url)
        said = " ".join(str(cause).split())[:200] if cause is not None else ""
        detail = f" ({type(cause).__name__}: {said})" if said else ""
        super().__init__(
            f"mail not enqueued: the {part} at {self.url} is unreachable{detail}; nothing was "
            "kept to send later, so calling again once it is back is safe"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (_restore_not_enqueued, (type(self), str(self), self.part, self.url))


def _restore_not_enqueued(cls: type[NotEnqueued], message: str, part: str, url: str) -> NotEnqueued:
    error = cls.__new__(cls)
    MailguardError.__init__(error, message)
    error.part, error.url = part, url
    return error
