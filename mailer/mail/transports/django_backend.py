"""Sending through a Django email backend (``EMAIL_BACKEND``-style dotted path): Django's SMTP
backend with Django's ``EMAIL_*`` settings, Anymail's backends (Postmark, Mailgun, SES...),
django-ses.

The message is built once, by mailguard, as for SMTP; the backend gets a Django
``EmailMessage`` that carries the envelope two ways: ``message()`` answers the built message
itself (Django's SMTP backend, django-ses and Anymail's SES backend send those exact bytes:
headers, attachments, the derived Message-ID), and its fields are filled for the backends that
post fields to an HTTP API: from, to, cc and bcc from the envelope (never read from headers),
reply_to, subject, the text and HTML bodies, attachments and the other headers (as
``extra_headers``) from the message. The backend's errors become the guard's
reactions (:mod:`mailer.mail.transports.provider`; an SMTP backend's replies are classified as
the SMTP transport classifies them).

Django is imported when the transport is built, never by ``mailer`` otherwise: a worker with
``MAILGUARD_TRANSPORT=django`` needs ``DJANGO_SETTINGS_MODULE`` (or settings configured by the
process), and the backend's package installed. Not ``workers.django.EmailBackend``: that one
enqueues, it would send every mail back to the queue.
"""

from __future__ import annotations

import email
import os
import smtplib
import time
from collections.abc import Callable
from email.message import EmailMessage
from typing import Any

from mailer.errors import PermanentSendError, SendError
from mailer.mail.envelope import Envelope
from mailer.mail.transports import provider
from mailer.mail.transports.anymail_errors import anymail_error
from mailer.mail.transports.base import SendReceipt, mask_addresses
from mailer.mail.transports.retrying import send_with_retries
from mailer.mail.transports.ses import ses_send_error
from mailer.mail.transports.smtp_errors import smtp_send_error

#: The backend that would enqueue again rather than send.
QUEUEING_BACKEND = "workers.django.EmailBackend"
#: Headers carried in the Django message's own fields, not in ``extra_headers``.
_FIELDS = frozenset(
    {"from", "to", "cc", "bcc", "reply-to", "subject", "mime-version"}
    | {"content-type", "content-transfer-encoding", "content-disposition"}
)


class DjangoTransport:
    """Sends each message through a new instance of the Django backend ``backend`` (a dotted
    path), opened with ``fail_silently=False``; ``max_attempts`` tries of what is worth an
    immediate retry. Raises ``ValueError`` at construction when Django is not configured or the
    backend does not import.

    ``provider`` names who accepts the mail in outcomes: the ESP of an Anymail backend
    (``postmark``), the backend's path for other API backends (django-ses), None for Django's
    SMTP backend (its receipt is SMTP's ``250``: ``smtplib`` raises on any other answer)."""

    def __init__(
        self,
        backend: str,
        *,
        max_attempts: int = 3,
        paused_hold: float = 900.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if backend.strip() == QUEUEING_BACKEND:
            raise ValueError(
                f"{QUEUEING_BACKEND} enqueues: the worker must send through a sending backend "
                "(django.core.mail.backends.smtp.EmailBackend, an Anymail backend, django-ses)"
            )
        self.backend = backend
        self.max_attempts = max_attempts
        self.paused_hold = paused_hold
        self._sleep = sleep
        self._backend_class = self._load(backend)
        self.provider = _provider_of(self._backend_class, backend)

    def __repr__(self) -> str:
        return f"DjangoTransport({self.backend})"

    def _load(self, backend: str) -> Any:
        """The backend's class, Django set up first; ``ValueError`` in one line."""
        return _import_backend(backend)

    def _options(self) -> dict[str, Any]:
        """Keyword arguments each backend instance is opened with, besides ``fail_silently``."""
        return {}

    def send(self, envelope: Envelope) -> SendReceipt:
        """Send the envelope through the backend; see the class and the module."""
        recipients = list(envelope.recipients)
        if not recipients:
            raise PermanentSendError("the envelope has no recipient", attempts=0)
        message_id = envelope.message_id

        def attempt() -> SendReceipt:
            wrapped = django_message(envelope)
            try:
                connection = self._backend_class(fail_silently=False, **self._options())
                sent = connection.send_messages([wrapped])
            except Exception as exc:  # every backend raises its own: turned into ours below
                error = self._send_error(exc, recipients)
                error.provider = self.provider
                raise error from None
            if not sent:
                nothing = provider.unknown(f"{self.backend} sent nothing (it answered {sent!r})")
                nothing.provider = self.provider
                raise nothing
            return self._receipt(message_id, getattr(wrapped, "anymail_status", None))

        return send_with_retries(
            attempt, max_attempts=self.max_attempts, what=str(message_id), sleep=self._sleep
        )

    def _receipt(self, message_id: str | None, status: Any) -> SendReceipt:
        """The receipt of an accepted mail; ``status`` is Anymail's (None for other backends).
        Anymail's status for the recipients is named unless it is plain ``sent``: ``queued``
        (Postmark's "delivery may be delayed"), or ``rejected`` beside ``sent`` when the ESP
        refused some recipients only."""
        if self.provider is None:
            return SendReceipt(message_id, 250, f"accepted by {self.backend}")
        esp_id = provider_id(getattr(status, "message_id", None))
        reply = f"accepted by {self.backend}" + ("" if esp_id is None else f": {esp_id}")
        said = getattr(status, "status", None)
        if isinstance(said, (set, frozenset)) and said and said != {"sent"}:
            reply += f" ({', '.join(sorted(str(s) for s in said))})"
        return SendReceipt(
            message_id, None, reply, provider=self.provider, provider_message_id=esp_id
        )

    def _send_error(self, exc: Exception, recipients: list[str]) -> SendError:
        """The backend's error as a ``SendError`` stating its reaction: SES's answer (from
        django-ses, or under Anymail's SES backend's error), Anymail's errors (before the SMTP
        and socket errors: Anymail's HTTP errors are ``OSError`` too), an SMTP backend's."""
        for error in (exc, exc.__cause__):
            if type(error).__name__ == "ClientError" and hasattr(error, "response"):  # botocore
                return ses_send_error(error, recipients, self.paused_hold)
        esp = getattr(self._backend_class, "esp_name", None)  # Anymail's name: Postmark
        named = esp if isinstance(esp, str) else self.provider or self.backend
        anymail = anymail_error(exc, recipients, named)
        if anymail is not None:
            return anymail
        if isinstance(exc, (smtplib.SMTPException, OSError)):
            return smtp_send_error(exc, recipients, "sending through Django's backend")
        text = mask_addresses(f"{type(exc).__name__}: {exc}", recipients)
        if isinstance(exc, (ValueError, TypeError)):  # BadHeaderError, an unsupported feature
            return provider.rejected(text)
        return provider.unknown(text)


def provider_id(value: Any) -> str | None:
    """A provider's message id as text: Anymail answers one id, or a set when recipients got
    different ones (joined, sorted, by commas); None when it gave none."""
    if value is None:
        return None
    if isinstance(value, (set, frozenset)):
        return ",".join(sorted(str(v) for v in value if v is not None)) or None
    return str(value)


def _provider_of(backend_class: Any, path: str) -> str | None:
    """None for Django's SMTP backend, the ESP's module name for Anymail's (``postmark``),
    else the backend's path."""
    from django.core.mail.backends.smtp import EmailBackend  # noqa: PLC0415 - Django on use

    if isinstance(backend_class, type) and issubclass(backend_class, EmailBackend):
        return None
    module = str(getattr(backend_class, "__module__", ""))
    if module.startswith("anymail.backends.") and getattr(backend_class, "esp_name", None):
        return module.rsplit(".", 1)[-1]
    return path


def django_message(envelope: Envelope) -> Any:
    """A Django ``EmailMultiAlternatives`` carrying the envelope: its ``message()`` answers a
    fresh copy of the built message (without ``Bcc``); from, to, cc and bcc are the envelope's
    (``from_email`` the From as the call gave it: Django's SMTP backend takes MAIL FROM from
    it), the other fields are read from the message."""
    from django.core.mail import EmailMultiAlternatives  # noqa: PLC0415 - Django on use

    message = envelope.message

    class _Built(EmailMultiAlternatives):  # type: ignore[misc] # Django ships no type hints
        def message(self, *, policy: Any = None) -> EmailMessage:
            return _copy(message)

    text, html = _bodies(message)
    built = _Built(
        subject=str(message.get("Subject", "")),
        body=text,
        from_email=envelope.from_email,
        to=[box.shown for box in envelope.to],
        cc=[box.shown for box in envelope.cc],
        bcc=[box.shown for box in envelope.bcc],
        reply_to=[str(value) for value in message.get_all("Reply-To", [])],
        headers={k: str(v) for k, v in message.items() if k.lower() not in _FIELDS},
    )
    if html is not None:
        built.attach_alternative(html, "text/html")
    for part in message.iter_attachments():
        if isinstance(part, EmailMessage):
            built.attach(part.get_filename(), part.get_content(), part.get_content_type())
    return built


class _WireMessage(EmailMessage):
    """The built message as Django's backends read it: ``as_bytes`` also takes ``linesep``
    (Django's own MIME classes do; Django's SMTP backend passes it), CRLF when neither is given,
    so a backend that posts the bytes (Anymail's SES backend, django-ses) sends what SMTP sends
    (RFC 5322 line ends)."""

    def as_bytes(
        self, unixfrom: bool = False, policy: Any = None, linesep: str | None = None
    ) -> bytes:
        chosen = policy or self.policy.clone(linesep="\r\n")
        if linesep is not None:
            chosen = chosen.clone(linesep=linesep)
        return super().as_bytes(unixfrom, policy=chosen)


def _copy(message: EmailMessage) -> EmailMessage:
    """A fresh copy of ``message`` without its ``Bcc`` header (a backend may change what it
    gets: Anymail's SES backend does)."""
    raw = message.as_bytes()
    copied = email.message_from_bytes(raw, _class=_WireMessage, policy=message.policy)
    del copied["Bcc"]
    return copied  # type: ignore[no-any-return] # the parser's class is _WireMessage


def _bodies(message: EmailMessage) -> tuple[str, str | None]:
    """The text body and the HTML alternative (None without one)."""
    text_part = message.get_body(preferencelist=("plain",))
    html_part = message.get_body(preferencelist=("html",))
    text = str(text_part.get_content()) if isinstance(text_part, EmailMessage) else ""
    html = str(html_part.get_content()) if isinstance(html_part, EmailMessage) else None
    return text, html


def _import_backend(path: str) -> Any:
    """The backend class at ``path``, Django set up first; ``ValueError`` in one line."""
    try:
        import django  # noqa: PLC0415 - only with MAILGUARD_TRANSPORT=django
        from django.conf import settings  # noqa: PLC0415
        from django.utils.module_loading import import_string  # noqa: PLC0415
    except ImportError:
        raise ValueError(
            "the django transport needs Django: pip install 'celery-mailguard[django]'"
        ) from None
    if not (settings.configured or os.environ.get("DJANGO_SETTINGS_MODULE")):
        raise ValueError("the django transport needs Django settings: set DJANGO_SETTINGS_MODULE")
    from django.apps import apps  # noqa: PLC0415

    try:
        if not apps.ready:
            django.setup()
        return import_string(path)
    except Exception as exc:  # ImportError, a backend module that fails on import
        raise ValueError(f"cannot import the Django backend {path!r}: {exc}") from None
