"""What every transport offers: ``send(envelope) -> SendReceipt``, or a ``SendError``.

A transport gets an :class:`~mailer.mail.envelope.Envelope`: the message, and beside it the
checked sender and recipients it goes to. It never reads an address out of the message's
headers (a carried message's headers may show others: a mailing list's address).
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass
from email.message import EmailMessage
from email.policy import EmailPolicy
from typing import Protocol, runtime_checkable

from mailer.mail.envelope import Envelope


@dataclass(frozen=True, slots=True)
class RefusedRecipient:
    """A recipient the server refused at ``RCPT`` while it accepted the mail for others.

    ``address`` is the envelope address as sent (in clear: never log it, the guard turns it
    into its limit key); ``code`` and ``reply`` are the server's reply to its ``RCPT``
    (every recipient address masked)."""

    address: str
    code: int
    reply: str


@dataclass(frozen=True, slots=True)
class SendReceipt:
    """The server accepted the message.

    ``code`` and ``reply`` are the SMTP reply to the message data (recipient addresses
    masked), ``attempts`` how many tries it took (1 when the first one worked). An API
    transport has no SMTP reply: ``code`` is None, ``reply`` the provider's answer,
    ``provider`` names the provider (``postmark``, ``ses``) and ``provider_message_id`` is the
    id the provider gave the mail (None when it gave none). ``refused`` are the recipients the
    server refused at ``RCPT`` while it took the mail for the others (empty: every recipient
    accepted; only the SMTP transport reads them, see docs/howto/transports.md).
    """

    message_id: str | None
    code: int | None
    reply: str
    attempts: int = 1
    provider: str | None = None
    provider_message_id: str | None = None
    refused: tuple[RefusedRecipient, ...] = ()


@runtime_checkable
class Transport(Protocol):
    """Hands one envelope's message to a mail server, to the envelope's recipients.

    ``send`` returns a :class:`SendReceipt` or raises
    :class:`~mailer.errors.TransientSendError` (may work later) or
    :class:`~mailer.errors.PermanentSendError` (never retry). Transports retry transient
    failures themselves, so a caller does not add its own short retry loop.
    """

    def send(self, envelope: Envelope) -> SendReceipt:
        """Send ``envelope.message`` from ``envelope.sender`` to ``envelope.recipients``."""
        ...


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


def recipient_hash(address: str) -> str:
    """A short, stable hash of ``address`` (case-insensitive) for logs: 12 hex characters.

    Not keyed: anyone who guesses the address can confirm it. Good for telling log lines apart,
    not for hiding an address from someone who already suspects it.
    """
    return hashlib.blake2b(
        address.strip().lower().encode("utf-8", "surrogatepass"), digest_size=6
    ).hexdigest()


def mask_addresses(text: str, addresses: list[str]) -> str:
    """Return ``text`` with every given address replaced by ``[recipient]`` (any case).

    Where text and address are ASCII (an SMTP reply, a normalised address), an address absent
    from ``text`` costs a substring test of the lowered strings, no pattern: the usual reply
    (``250 OK``) names none, and a pattern per recipient (each new to ``re``'s cache) cost a
    sent mail about 0.2 ms. Elsewhere each address is looked for with its pattern, whose case
    rules (the Kelvin sign matches ``k``) no lowering reproduces."""
    for address in sorted(set(addresses), key=len, reverse=True):
        if not address:
            continue
        if text.isascii() and address.isascii() and address.lower() not in text.lower():
            continue
        text = re.sub(re.escape(address), "[recipient]", text, flags=re.IGNORECASE)
    return text
