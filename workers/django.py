"""Django's ``EMAIL_BACKEND``: every ``send_mail`` / ``EmailMessage.send()`` goes through the guard.

.. code-block:: python

    # settings.py
    EMAIL_BACKEND = "workers.django.EmailBackend"
    DEFAULT_FROM_EMAIL = "Shop <orders@example.org>"
    # mailguard reads its own MAILGUARD_* variables (broker, limiter, policy, secret, SMTP)

``send_messages(messages)`` enqueues one guarded ``send_mail`` task per message, sets
``message.mailguard_ids`` (the task ids: ``[]`` for a message not enqueued) and returns how many
it enqueued (Django's contract); the worker sends each exactly once, when every recipient has
room. A message with no recipients enqueues nothing.

Each message is carried whole: ``message.message()``, the message Django's SMTP backend would
send, as the bytes that backend sends (``as_bytes(linesep="\\r\\n")``), with the envelope
Django's SMTP backend uses: ``from_email`` as the envelope sender and ``recipients()`` (to, cc,
bcc; lazy strings made text, empty ones dropped) as the envelope recipients. Whatever Django
builds arrives as Django builds it: headers the application sets (a ``To`` or ``Cc`` that shows
other addresses than the envelope, ``Reply-To``, ``From``, custom headers), every alternative in
its order, attachments, inline parts with their ``Content-ID``, the body byte for byte, and
Django's own ``Message-ID`` and ``Date`` (made when the application sends, so a redelivered task
sends the same ones). A header with a newline raises Django's ``BadHeaderError`` (Django's own
check, when the message is built). An enqueue error (a bad address, a message over
``MAILGUARD_MAX_MESSAGE_BYTES``) raises; the broker or the result backend out of reach raises
:class:`mailer.errors.NotEnqueued` within ``MAILGUARD_ENQUEUE_TIMEOUT`` (not enqueued: sending
again is safe). With ``fail_silently`` such a message is skipped and not counted. A broker that
no worker reads (``memory://``, the default, with no worker in this process) raises
:class:`workers.run.call.NoConsumer` whatever ``fail_silently``
says: every message would be lost.

The task goes through the current Celery app (``send_mail`` is a shared task): the project's own
app when it has one, else mailguard's. Needs Django (``pip install 'celery-mailguard[django]'``).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from django.core.mail import BadHeaderError
from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.message import EmailMessage
from django.utils.encoding import force_str


class EmailBackend(BaseEmailBackend):  # type: ignore[misc] # Django ships no type hints
    """Hands each message to the guarded ``send_mail`` task; see the module doc."""

    def send_messages(self, email_messages: Iterable[EmailMessage]) -> int:
        """Enqueue one task per message that has recipients; return how many were enqueued."""
        from workers.run.call import NoConsumer  # noqa: PLC0415 - Celery only when mail is sent
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
    """``send_mail``'s keyword arguments for a Django message (JSON-safe): the envelope (to, cc,
    bcc, from_email, as Django's SMTP backend takes them) and the message itself (``mime``:
    ``message().as_bytes(linesep="\\r\\n")``, the bytes Django's SMTP backend sends). Raises
    ``BadHeaderError`` for a header value with a newline, as Django does."""
    kwargs: dict[str, Any] = {"to": _texts(message.to, "To")}
    for name in ("cc", "bcc"):
        values = _texts(getattr(message, name, ()), name)
        if values:
            kwargs[name] = values
    if message.from_email:
        kwargs["from_email"] = _one_line(message.from_email, "From")
    wire = message.message().as_bytes(linesep="\r\n")
    kwargs["mime"] = base64.b64encode(wire).decode("ascii")
    return kwargs


def _texts(values: Any, name: str) -> list[str]:
    """Addresses as text (lazy translations made str), empty ones dropped as Django drops them."""
    return [text for text in (_one_line(value, name) for value in values or ()) if text]


def _one_line(value: Any, name: str) -> str:
    """``value`` as text; a newline in it is header injection: ``BadHeaderError``."""
    text = str(force_str(value))
    if "\n" in text or "\r" in text:
        raise BadHeaderError(f"Header values can't contain newlines (header {name!r})")
    return text
