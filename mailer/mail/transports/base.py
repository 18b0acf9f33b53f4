"""What every transport offers: ``send(message) -> SendReceipt``, or a ``SendError``."""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass
from email.message import EmailMessage
from email.policy import EmailPolicy
from email.utils import getaddresses
from typing import Protocol, runtime_checkable

#: Headers whose addresses a transport sends to (and masks in replies and logs).
RECIPIENT_HEADERS = ("To", "Cc", "Bcc")


@dataclass(frozen=True, slots=True)
class SendReceipt:
    """The server accepted the message.

    ``code`` and ``reply`` are the SMTP reply to the message data (recipient addresses
    masked), ``attempts`` how many tries it took (1 when the first one worked). An API
    transport has no SMTP reply: ``code`` is None, ``reply`` the provider's answer,
    ``provider`` names the provider (``postmark``, ``ses``) and ``provider_message_id`` is the
    id the provider gave the mail (None when it gave none).
    """

    message_id: str | None
    code: int | None
    reply: str
    attempts: int = 1
    provider: str | None = None
    provider_message_id: str | None = None


@runtime_checkable
class Transport(Protocol):
    """Hands one message to a mail server.

    ``send`` returns a :class:`SendReceipt` or raises
    :class:`~mailer.errors.TransientSendError` (may work later) or
    :class:`~mailer.errors.PermanentSendError` (never retry). Transports retry transient
    failures themselves, so a caller does not add its own short retry loop.
    """

    def send(self, message: EmailMessage) -> SendReceipt:
        """Send ``message`` to the addresses in its To, Cc and Bcc headers."""
        ...


def recipients_of(message: EmailMessage) -> list[str]:
    """The addresses in the message's To, Cc and Bcc headers; a carried message's envelope
    (:mod:`mailer.mail.carried`: its headers may show others)."""
    envelope = getattr(message, "envelope_recipients", None)
    if envelope is not None:
        return list(envelope)
    values = [str(v) for name in RECIPIENT_HEADERS for v in message.get_all(name, [])]
    return [address for _, address in getaddresses(values) if address]


def wire_bytes(message: EmailMessage, *, utf8: bool = False) -> bytes:
    """The message as it goes on the wire: CRLF line ends, without its ``Bcc`` header (which
    only names envelope recipients), a body line starting ``From `` as it is (as Django's
    backends send it); ``utf8``: headers in UTF-8 (SMTPUTF8). For SMTP and for API transports
    that take raw MIME (SES)."""
    sent = copy.copy(message)
    del sent["Bcc"]  # replaces the copy's header list: the original keeps its Bcc
    del sent["Resent-Bcc"]
    policy = message.policy.clone(linesep="\r\n")
    if utf8 and isinstance(policy, EmailPolicy):  # SMTPUTF8 needs a policy that has utf8
        policy = policy.clone(utf8=True)
    return sent.as_bytes(policy=policy)


def envelope_sender(message: EmailMessage) -> str:
    """The envelope sender (``MAIL FROM``): a carried message's own, else the address of the
    ``Sender`` header or, without one, of ``From``, as ``smtplib``'s ``send_message`` takes it."""
    carried = getattr(message, "envelope_sender", None)
    if carried:
        return str(carried)
    found = getaddresses([str(message.get("Sender") or message.get("From") or "")])
    return found[0][1] if found else ""


def sender_of(message: EmailMessage) -> str:
    """The address of the message's ``From`` header ('' without one)."""
    found = getaddresses([str(message.get("From", ""))])
    return found[0][1] if found else ""


def recipient_hash(address: str) -> str:
    """A short, stable hash of ``address`` (case-insensitive) for logs: 12 hex characters.

    Not keyed: anyone who guesses the address can confirm it. Good for telling log lines apart,
    not for hiding an address from someone who already suspects it.
    """
    return hashlib.blake2b(
        address.strip().lower().encode("utf-8", "surrogatepass"), digest_size=6
    ).hexdigest()


def mask_addresses(text: str, addresses: list[str]) -> str:
    """Return ``text`` with every given address replaced by ``[recipient]`` (any case)."""
    for address in sorted(set(addresses), key=len, reverse=True):
        if address:
            text = re.sub(re.escape(address), "[recipient]", text, flags=re.IGNORECASE)
    return text
