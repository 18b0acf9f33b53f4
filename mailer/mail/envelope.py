"""A message's addresses and attachments, read from ``send_mail``'s arguments in the worker.

``send_mail.delay`` already refused malformed shapes (:mod:`mailer.mail.arguments`); these helpers
are the worker's own check of what it received (a message from another producer may skip
``delay``): they raise ``InvalidAddress`` / ``InvalidMessage`` naming the argument, which the
guard records as ``dropped`` / ``invalid``. Addresses never appear in the errors.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
from collections.abc import Set
from email.message import EmailMessage
from email.utils import getaddresses
from typing import Any

from mailer.errors import InvalidAddress, InvalidMessage
from mailer.mail.address import AddressRules, Recipient, mailbox, normalise_address, shown
from mailer.mail.carried import CarriedMessage, carried_bytes
from mailer.mail.message import Attachment

_CHARSET = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,39}")


def addresses(value: Any, name: str) -> list[str]:
    """An address or a list of them as a list (None: empty); raises ``InvalidAddress``."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(a, str) for a in items):
        raise InvalidAddress(f"{name} must be an address or a list of addresses")
    return list(items)


def recipients(value: Any, name: str, rules: AddressRules) -> list[tuple[str, Recipient]]:
    """Each address of argument ``name`` (an address or ``"Name <address>"``): the form its
    header shows (the display name kept, the domain in Punycode) and the normalised recipient
    (for the envelope and the limiter)."""
    return [mailbox(item, rules) for item in addresses(value, name)]


def sender(from_email: Any, default: str, rules: AddressRules) -> str:
    """The From header: ``from_email`` (an address or ``"Name <address>"``, its address
    checked and its domain in Punycode, as recipients' are) or the configured ``default``
    (``MAILGUARD_SENDER``)."""
    if from_email is None:
        return default
    if not isinstance(from_email, str):
        raise InvalidAddress("from_email must be an address")
    return mailbox(from_email, rules)[0]


def reply_to(value: Any, rules: AddressRules) -> list[str]:
    """The Reply-To addresses (each an address or ``"Name <address>"``, checked)."""
    return [form for form, _ in recipients(value, "reply_to", rules)]


def attachments(value: Any) -> tuple[Attachment, ...]:
    """``[filename, base64 content, mimetype]`` items, each with an optional fourth, a dict
    of ``charset``, ``inline`` and ``content_id``, as :class:`Attachment`; raises
    ``InvalidMessage`` naming the item."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise InvalidMessage("attachments must be a list")
    out = []
    for n, item in enumerate(value):
        if not isinstance(item, list | tuple) or len(item) not in (3, 4):
            raise InvalidMessage(f"attachments[{n}] must be [filename, base64 content, mimetype]")
        filename, content, mimetype = item[:3]
        if not all(isinstance(part, str) for part in item[:3]):
            raise InvalidMessage(f"attachments[{n}] must hold three strings")
        try:
            data = base64.b64decode(content, validate=True)
        except (ValueError, binascii.Error):
            raise InvalidMessage(f"attachments[{n}] content is not valid base64") from None
        options = _options(item[3] if len(item) == 4 else {}, n)
        out.append(Attachment(filename, data, mimetype, **options))
    return tuple(out)


def _options(value: Any, n: int) -> dict[str, Any]:
    """An attachment's options: ``charset`` (str), ``inline`` (bool), ``content_id`` (str)."""
    types = {"charset": str, "inline": bool, "content_id": str}
    if not isinstance(value, dict) or any(
        key not in types or not isinstance(item, types[key]) for key, item in value.items()
    ):
        raise InvalidMessage(
            f"attachments[{n}] options must be a dict of charset (str), inline (bool) and "
            "content_id (str)"
        )
    return dict(value)


def carried(value: Any) -> bytes | None:
    """The whole message ``mime`` carries (None: none), checked (:mod:`mailer.mail.carried`)."""
    return None if value is None else carried_bytes(value)


def charset(value: Any) -> str:
    """The body's charset: ``utf-8`` when None, else a charset Python knows."""
    if value is None:
        return "utf-8"
    if not isinstance(value, str) or not _CHARSET.fullmatch(value):
        raise InvalidMessage("charset must be a charset name such as utf-8 or iso-8859-1")
    try:
        codecs.lookup(value)
    except LookupError:
        raise InvalidMessage("charset is not one Python knows") from None
    return value.lower()


def without_recipients(message: EmailMessage, keys: Set[str], rules: AddressRules) -> EmailMessage:
    """``message`` without the addresses whose limit key is in ``keys`` in To, Cc and Bcc (a
    header left empty is removed); a carried message keeps its headers as the application wrote
    them and loses them from its envelope. The message is changed in place and returned."""
    if isinstance(message, CarriedMessage):
        message.envelope_recipients = tuple(
            address
            for address in message.envelope_recipients
            if normalise_address(address, rules).limit_key not in keys
        )
        return message
    for header in ("To", "Cc", "Bcc"):
        values = message.get_all(header, [])
        if not values:
            continue
        kept = [
            shown(name, address)
            for name, address in getaddresses([str(v) for v in values])
            if address and normalise_address(address, rules).limit_key not in keys
        ]
        del message[header]
        if kept:
            message[header] = ", ".join(kept)
    return message
