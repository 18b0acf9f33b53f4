"""A message carried whole: the bytes an application built (Django's ``EmailMessage.message()``),
sent as they are to an envelope given beside them.

``send_mail(..., mime=<base64>)`` carries a complete RFC 5322 message; the worker sends exactly
those bytes (CRLF line ends) to the envelope recipients ``to``, ``cc`` and ``bcc`` from the
envelope sender ``from_email``, as Django's SMTP backend sends ``message().as_bytes()`` to
``recipients()`` from ``from_email``. The headers the message shows (``To``, ``Cc``, a mailing
list's address) may differ from the envelope; the limiter and the gates count the envelope. Use
it for a message another library built; for text mailguard should build, use the other
arguments (``subject``, ``body``, ``html``...), which the worker checks field by field.
"""

from __future__ import annotations

import base64
import binascii
from email.errors import (
    FirstHeaderLineIsContinuationDefect,
    HeaderDefect,
    MissingHeaderBodySeparatorDefect,
)
from email.message import EmailMessage
from email.parser import BytesHeaderParser, BytesParser

from mailer.errors import InvalidMessage
from mailer.mail.mime import CARRIED_POLICY

_MALFORMED = (HeaderDefect, FirstHeaderLineIsContinuationDefect, MissingHeaderBodySeparatorDefect)
#: Headers a carried message must not have: they would name recipients no one counts.
FORBIDDEN_HEADERS = ("Bcc", "Resent-To", "Resent-Cc", "Resent-Bcc")


def carried_bytes(value: object) -> bytes:
    """The message ``mime`` carries (base64 text of a complete message), checked: a header
    block with ``From``, no ``Bcc`` or ``Resent-*`` recipients, no malformed header line.
    Raises :class:`~mailer.errors.InvalidMessage` naming what is wrong, never quoting it."""
    if not isinstance(value, str):
        raise InvalidMessage("mime must be base64 text of a complete message")
    try:
        data = base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        raise InvalidMessage("mime is not valid base64") from None
    headers = BytesHeaderParser(policy=CARRIED_POLICY).parsebytes(data)
    if any(isinstance(defect, _MALFORMED) for defect in headers.defects) or not len(headers):
        raise InvalidMessage("mime: the message's header block is malformed")
    if headers.get("From") is None:
        raise InvalidMessage("mime: the message has no From header")
    for name in FORBIDDEN_HEADERS:
        if name in headers:
            raise InvalidMessage(f"mime: the message has a {name} header; give bcc=... instead")
    return data


def carried_message_id(data: bytes) -> str | None:
    """The ``Message-ID`` of a carried message (None without one), read from its headers."""
    value = BytesHeaderParser(policy=CARRIED_POLICY).parsebytes(data).get("Message-ID")
    return None if value is None else str(value).strip()


def carried_message(data: bytes) -> EmailMessage:
    """``data`` (from :func:`carried_bytes`) parsed, to be sent as it is. Its envelope is given
    beside it (:class:`mailer.mail.envelope.Envelope`), never read from its headers."""
    parsed = BytesParser(_class=EmailMessage, policy=CARRIED_POLICY).parsebytes(data)
    assert isinstance(parsed, EmailMessage)  # the parser's class
    return parsed
