"""Django's ``EMAIL_BACKEND``: every ``send_mail`` / ``EmailMessage.send()`` goes through the guard.

.. code-block:: python

    # settings.py
    EMAIL_BACKEND = "workers.django.EmailBackend"
    DEFAULT_FROM_EMAIL = "Shop <orders@example.org>"
    # mailguard reads its own MAILGUARD_* variables (broker, limiter, policy, secret, SMTP)

``send_messages(messages)`` enqueues one guarded ``send_mail`` task per message and returns how
many it enqueued (Django's contract); the worker sends each exactly once, when every recipient
has room. A message with no recipients enqueues nothing. It carries ``from_email`` (Django fills
in ``DEFAULT_FROM_EMAIL``), to, cc, bcc, reply_to, ``extra_headers`` (a ``From`` or
``Reply-To`` header becomes ``from_email`` / ``reply_to``, as Django itself treats them), the
``text/html`` alternative of ``EmailMultiAlternatives`` and attachments (``(filename, content,
mimetype)`` tuples and single-part ``MIMEBase`` parts, base64 in the task). What cannot be
carried raises ``ValueError`` (another kind of alternative, a multipart ``MIMEBase``, a reserved
header such as ``To``); so does an enqueue error (a bad address, a message over
``MAILGUARD_MAX_MESSAGE_BYTES``, the broker down); with ``fail_silently`` the message is
skipped and not counted. A broker that no worker reads (``memory://``, the default, with no
worker in this process) raises :class:`workers.call.NoConsumer` whatever ``fail_silently``
says: every message would be lost.

The task goes through the current Celery app (``send_mail`` is a shared task): the project's own
app when it has one, else mailguard's. Needs Django (``pip install 'celery-mailguard[django]'``).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from email.mime.base import MIMEBase
from typing import Any

from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.message import EmailMessage
from django.utils.encoding import force_str


class EmailBackend(BaseEmailBackend):  # type: ignore[misc] # Django ships no type hints
    """Hands each message to the guarded ``send_mail`` task; see the module doc."""

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
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
    """``send_mail``'s keyword arguments for a Django message (JSON-safe)."""
    kwargs: dict[str, Any] = {
        "to": _texts(message.to),
        "subject": force_str(message.subject),
        "body": force_str(message.body),
    }
    for name in ("cc", "bcc", "reply_to"):
        values = _texts(getattr(message, name, ()))
        if values:
            kwargs[name] = values
    if message.from_email:
        kwargs["from_email"] = force_str(message.from_email)
    headers = {force_str(k): force_str(v) for k, v in (message.extra_headers or {}).items()}
    # Django lets these two headers stand in for the message's own fields: carry them as such.
    for header, name in (("from", "from_email"), ("reply-to", "reply_to")):
        given = [k for k in headers if k.lower() == header]
        if given and name == "from_email":
            kwargs[name] = headers.pop(given[0])
        elif given and name not in kwargs:
            kwargs[name] = [headers.pop(given[0])]
    if headers:
        kwargs["headers"] = headers
    html = _html(message)
    if html is not None:
        kwargs["html"] = html
    attachments = [_attachment(item) for item in message.attachments]
    if attachments:
        kwargs["attachments"] = attachments
    return kwargs


def _texts(values: Any) -> list[str]:
    """Addresses as text (lazy translations made str), empty ones dropped as Django drops them."""
    return [text for text in (force_str(value) for value in values or ()) if text]


def _html(message: EmailMessage) -> str | None:
    """The ``text/html`` alternative; any other alternative cannot be carried (ValueError)."""
    html = None
    for alternative in getattr(message, "alternatives", ()) or ():
        content, mimetype = alternative[0], alternative[1]
        if mimetype != "text/html" or html is not None:
            raise ValueError(
                f"mailguard carries one text/html alternative, not {mimetype!r}; "
                "attach other parts as attachments"
            )
        html = str(content)
    if html is not None:
        return html
    if getattr(message, "content_subtype", "plain") == "html":  # an EmailMessage sent as HTML
        return str(message.body)
    return None


def _attachment(item: Any) -> list[str]:
    """``[filename, base64 content, mimetype]`` for a Django attachment."""
    if isinstance(item, MIMEBase):
        if item.is_multipart():
            raise ValueError(
                "mailguard carries attachments as one file each; a multipart MIMEBase part "
                f"({item.get_content_type()}) cannot be carried"
            )
        payload = item.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        filename, mimetype = item.get_filename() or "attachment", item.get_content_type()
    else:
        filename, content, mimetype = item[0], item[1], item[2]
        data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        mimetype = mimetype or "application/octet-stream"
    return [str(filename), base64.b64encode(data).decode("ascii"), str(mimetype)]
