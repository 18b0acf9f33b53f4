"""A message's addresses and attachments, read from ``send_mail``'s arguments in the worker.

``send_mail.delay`` already refused malformed shapes (:mod:`mailer.mail.arguments`); these helpers
are the worker's own check of what it received (a message from another producer may skip
``delay``): they raise ``InvalidAddress`` / ``InvalidMessage`` naming the argument, which the
guard records as ``dropped`` / ``invalid``. Addresses never appear in the errors.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Set
from email.message import EmailMessage
from email.utils import formataddr, getaddresses, parseaddr
from typing import Any

from mailer.errors import InvalidAddress, InvalidMessage
from mailer.mail.address import AddressRules, normalise_address
from mailer.mail.message import Attachment


def addresses(value: Any, name: str) -> list[str]:
    """An address or a list of them as a list (None: empty); raises ``InvalidAddress``."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(a, str) for a in items):
        raise InvalidAddress(f"{name} must be an address or a list of addresses")
    return list(items)


def sender(from_email: Any, default: str, rules: AddressRules) -> str:
    """The From header: ``from_email`` (an address or ``"Name <address>"``, its address
    checked) or the configured ``default`` (``MAILGUARD_SENDER``)."""
    if from_email is None:
        return default
    if not isinstance(from_email, str):
        raise InvalidAddress("from_email must be an address")
    name, address = parseaddr(from_email)
    normalise_address(address, rules)  # raises for a bad address
    return formataddr((name, address)) if name else address


def reply_to(value: Any, rules: AddressRules) -> list[str]:
    """The Reply-To addresses (each an address or ``"Name <address>"``, checked)."""
    out = []
    for item in addresses(value, "reply_to"):
        name, address = parseaddr(item)
        normalise_address(address, rules)
        out.append(formataddr((name, address)) if name else address)
    return out


def attachments(value: Any) -> tuple[Attachment, ...]:
    """``[filename, base64 content, mimetype]`` items as :class:`Attachment`; raises
    ``InvalidMessage`` naming the item."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise InvalidMessage("attachments must be a list")
    out = []
    for n, item in enumerate(value):
        if not isinstance(item, list | tuple) or len(item) != 3:
            raise InvalidMessage(f"attachments[{n}] must be [filename, base64 content, mimetype]")
        filename, content, mimetype = item
        if not all(isinstance(part, str) for part in item):
            raise InvalidMessage(f"attachments[{n}] must hold three strings")
        try:
            data = base64.b64decode(content, validate=True)
        except (ValueError, binascii.Error):
            raise InvalidMessage(f"attachments[{n}] content is not valid base64") from None
        out.append(Attachment(filename, data, mimetype))
    return tuple(out)


def without_recipients(message: EmailMessage, keys: Set[str], rules: AddressRules) -> EmailMessage:
    """``message`` without the addresses whose limit key is in ``keys`` in To, Cc and Bcc (a
    header left empty is removed). The message is changed in place and returned."""
    for header in ("To", "Cc", "Bcc"):
        values = message.get_all(header, [])
        if not values:
            continue
        kept = [
            address
            for _, address in getaddresses([str(v) for v in values])
            if address and normalise_address(address, rules).limit_key not in keys
        ]
        del message[header]
        if kept:
            message[header] = ", ".join(kept)
    return message
