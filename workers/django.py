"""Django's ``EMAIL_BACKEND``: every ``send_mail`` / ``EmailMessage.send()`` goes through the guard.

.. code-block:: python

    # settings.py
    EMAIL_BACKEND = "workers.django.EmailBackend"
    DEFAULT_FROM_EMAIL = "Shop <orders@example.org>"
    # mailguard reads its own MAILGUARD_* variables (broker, limiter, policy, secret, SMTP)

``send_messages(messages)`` enqueues one guarded ``send_mail`` task per message, sets
``message.mailguard_ids`` (the task ids: ``[]`` for a message not enqueued) and returns how many
it enqueued (Django's contract); the worker sends each exactly once, when every recipient has
room. A message with no recipients enqueues nothing. It carries what Django's own backends send:
``from_email`` (Django fills in ``DEFAULT_FROM_EMAIL``), to, cc, bcc (lazy strings made text,
empty ones dropped, ``"Name <address>"`` kept), reply_to, ``extra_headers`` (a ``Reply-To``
header wins over ``reply_to``; a ``From`` header is the From and ``from_email`` the envelope
sender, also written as ``Sender``; a ``Message-ID`` or ``Date`` is kept), the ``text/html``
alternative of ``EmailMultiAlternatives`` or a body with ``content_subtype = "html"``,
``encoding``, and attachments (``(filename, content, mimetype)`` tuples and single-part
``MIMEBase`` parts: a text file keeps its charset, an inline image its ``Content-ID``, a
``message/rfc822`` attachment its message). A header with a newline raises Django's
``BadHeaderError``. What cannot be carried raises ``ValueError`` (another kind of alternative, a
multipart ``MIMEBase``, a reserved header such as ``To``); so does an enqueue error (a bad
address, a message over ``MAILGUARD_MAX_MESSAGE_BYTES``, the broker down); with
``fail_silently`` the message is skipped and not counted. A broker that no worker reads
(``memory://``, the default, with no worker in this process) raises
:class:`workers.call.NoConsumer` whatever ``fail_silently`` says: every message would be lost.

The task goes through the current Celery app (``send_mail`` is a shared task): the project's own
app when it has one, else mailguard's. Needs Django (``pip install 'celery-mailguard[django]'``).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from email.message import Message
from email.mime.base import MIMEBase
from email.utils import getaddresses
from typing import Any

from django.conf import settings
from django.core.mail import BadHeaderError
from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.message import EmailMessage
from django.utils.encoding import force_bytes, force_str

from mailer.mail.address import shown, split_display_name


class EmailBackend(BaseEmailBackend):  # type: ignore[misc] # Django ships no type hints
    """Hands each message to the guarded ``send_mail`` task; see the module doc."""

    def send_messages(self, email_messages: Iterable[EmailMessage]) -> int:
        """Enqueue one task per message that has recipients; return how many were enqueued."""
        from workers.call import NoConsumer  # noqa: PLC0415 - Celery only when mail is sent
        from workers.tasks import send_mail  # noqa: PLC0415

        enqueued = 0
        for message in email_messages:
            message.mailguard_ids = []
            if not message.recipients():
                continue
            try:
                result = send_mail.apply_async(kwargs=task_kwargs(message))
            except NoConsumer:
                raise  # a broker nobody reads would lose every message, silently or not
            except Exception:
                if not self.fail_silently:
                    raise
                continue
            message.mailguard_ids = [result.id]
            enqueued += 1
        return enqueued


def task_kwargs(message: EmailMessage) -> dict[str, Any]:
    """``send_mail``'s keyword arguments for a Django message (JSON-safe); raises
    ``BadHeaderError`` for a header value with a newline, ``ValueError`` for what cannot go."""
    kwargs: dict[str, Any] = {
        "to": _texts(message.to, "To"),
        "subject": _one_line(message.subject, "Subject"),
        "body": force_str(message.body),
    }
    for name in ("cc", "bcc", "reply_to"):
        values = _texts(getattr(message, name, ()), name)
        if values:
            kwargs[name] = values
    if message.from_email:
        kwargs["from_email"] = _one_line(message.from_email, "From")
    headers = {
        _one_line(k, "header name"): _one_line(v, str(k))
        for k, v in (message.extra_headers or {}).items()
    }
    _header_fields(headers, kwargs)
    if headers:
        kwargs["headers"] = headers
    encoding = (message.encoding or settings.DEFAULT_CHARSET or "utf-8").lower()
    if encoding != "utf-8":
        kwargs["charset"] = encoding
    _body(message, kwargs)
    attachments = [_attachment(item, encoding) for item in message.attachments]
    if attachments:
        kwargs["attachments"] = attachments
    return kwargs


def _header_fields(headers: dict[str, str], kwargs: dict[str, Any]) -> None:
    """Django's header rules: ``Reply-To`` wins over ``reply_to``; ``From`` is the From and
    ``from_email`` the envelope sender (``Sender``: smtplib takes MAIL FROM from it)."""
    for key in [k for k in headers if k.lower() == "reply-to"]:
        kwargs["reply_to"] = [
            shown(name, address) for name, address in getaddresses([headers.pop(key)]) if address
        ]
    for key in [k for k in headers if k.lower() == "from"]:
        header_from = headers.pop(key)
        envelope = kwargs.get("from_email")
        kwargs["from_email"] = header_from
        if envelope and _address_of(envelope) != _address_of(header_from):
            headers["Sender"] = envelope


def _address_of(text: str) -> str:
    try:
        return split_display_name(text)[1].lower()
    except ValueError:
        return text  # the enqueue check refuses it, naming the argument


def _body(message: EmailMessage, kwargs: dict[str, Any]) -> None:
    """The ``text/html`` alternative; a body with ``content_subtype = "html"`` is sent as
    ``text/html`` alone. Any other alternative cannot be carried (ValueError)."""
    html = None
    for alternative in getattr(message, "alternatives", ()) or ():
        content, mimetype = alternative[0], alternative[1]
        if mimetype != "text/html" or html is not None:
            raise ValueError(
                f"mailguard carries one text/html alternative, not {mimetype!r}; "
                "attach other parts as attachments"
            )
        html = force_str(content)
    if getattr(message, "content_subtype", "plain") == "html":
        if html is not None:
            raise ValueError("mailguard carries one text/html part: an HTML body or alternative")
        kwargs["html"], kwargs["body"] = kwargs["body"], ""
    elif html is not None:
        kwargs["html"] = html


def _attachment(item: Any, encoding: str) -> list[Any]:
    """``[filename, base64 content, mimetype, options]`` for a Django attachment."""
    options: dict[str, Any] = {}
    if isinstance(item, MIMEBase):
        filename, data, mimetype = _mime_part(item, options)
    else:
        filename, content, mimetype = item[0], item[1], item[2]
        mimetype = mimetype or "application/octet-stream"
        if mimetype == "message/rfc822":
            data = _message_bytes(content)
        elif isinstance(content, str):
            data = content.encode(encoding)
            if mimetype.startswith("text/"):
                options["charset"] = encoding
        else:
            data = bytes(content)
    entry = [force_str(filename or ""), base64.b64encode(data).decode("ascii"), str(mimetype)]
    return [*entry, options] if options else entry


def _mime_part(item: MIMEBase, options: dict[str, Any]) -> tuple[str, bytes, str]:
    """A single-part ``MIMEBase`` (or a ``message/rfc822`` one): filename, bytes, type."""
    mimetype = item.get_content_type()
    if mimetype == "message/rfc822":
        data = _message_bytes(item.get_payload(0))
    elif item.is_multipart():
        raise ValueError(
            "mailguard carries attachments as one file each; a multipart MIMEBase part "
            f"({mimetype}) cannot be carried"
        )
    else:
        payload = item.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
    if item.get_content_maintype() == "text" and item.get_content_charset():
        options["charset"] = item.get_content_charset()
    if item.get_content_disposition() == "inline":
        options["inline"] = True
    if item["Content-ID"]:
        options["content_id"] = str(item["Content-ID"]).strip()
    return item.get_filename() or "", data, mimetype


def _message_bytes(content: Any) -> bytes:
    """A ``message/rfc822`` attachment's message as bytes (a Django or a Python message)."""
    if isinstance(content, EmailMessage):
        content = content.message()
    if isinstance(content, Message):
        return bytes(content.as_bytes())
    return bytes(force_bytes(content))


def _texts(values: Any, name: str) -> list[str]:
    """Addresses as text (lazy translations made str), empty ones dropped as Django drops them."""
    return [text for text in (_one_line(value, name) for value in values or ()) if text]


def _one_line(value: Any, name: str) -> str:
    """``value`` as text; a newline in it is header injection: ``BadHeaderError``."""
    text = str(force_str(value))
    if "\n" in text or "\r" in text:
        raise BadHeaderError(f"Header values can't contain newlines (header {name!r})")
    return text
