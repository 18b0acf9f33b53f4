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
from email.utils import getaddresses

from mailer.errors import InvalidMessage
from mailer.mail.mime import CARRIED_POLICY

_MALFORMED = (HeaderDefect, FirstHeaderLineIsContinuationDefect, MissingHeaderBodySeparatorDefect)
#: Headers a carried message must not have: they would name recipients no one counts.
FORBIDDEN_HEADERS = ("Bcc", "Resent-To", "Resent-Cc", "Resent-Bcc")


class CarriedMessage(EmailMessage):
    """A carried message, parsed; sent to ``envelope_recipients`` from ``envelope_sender``
    (addresses), whatever its ``To``, ``Cc`` and ``From`` headers show."""

    envelope_sender: str = ""
    envelope_recipients: tuple[str, ...] = ()


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


def carried_message(data: bytes, sender: str, recipients: tuple[str, ...]) -> CarriedMessage:
    """``data`` (from :func:`carried_bytes`) parsed, with its envelope: ``sender`` and
    ``recipients`` as their headers show them (``"Name <address>"`` or an address)."""
    parsed = BytesParser(_class=CarriedMessage, policy=CARRIED_POLICY).parsebytes(data)
    assert isinstance(parsed, CarriedMessage)  # the parser's class
    parsed.envelope_sender = _bare([sender])[0] if sender else ""
    parsed.envelope_recipients = tuple(_bare(list(recipients)))
    return parsed


def _bare(shown: list[str]) -> list[str]:
    return [address for _, address in getaddresses(shown) if address]
