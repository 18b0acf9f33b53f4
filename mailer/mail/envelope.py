"""A mail's envelope (sender, recipients, message), made once in the worker, and the worker's
reading of ``send_mail``'s arguments it is made from.

How an address travels from ``send_mail.delay`` to ``RCPT TO`` (``tests/mail/test_envelope.py``
counts the parses over real SMTP sends):

1. ``delay()`` checks every address (:func:`mailer.mail.arguments.check_arguments`):
   :func:`mailer.mail.address.mailbox` parses it once (``"Name <address>"`` or an address) and
   the call is refused when one is invalid. The call goes on the queue as the caller wrote it.
2. A Celery worker's receipt check, in its main process
   (:class:`workers.run.request.GuardedRequest`), bounds the arguments again before the pool with
   the same check, addresses bounded (text, one line, how many) but not parsed: the guard
   parses them next, and a producer other than ``delay()`` that queued a bad address gets it
   recorded ``dropped`` / ``invalid`` by the guard.
3. In the pool, the guard's validation (:mod:`mailer.guard.validate`) parses each address once
   more with :func:`~mailer.mail.address.mailbox` (:func:`recipients`, :func:`sender_of_call`):
   the shown form (display name kept, domain in Punycode) and the
   :class:`~mailer.mail.address.Recipient` (address, limit key). These make the mail's
   :class:`~mailer.mail.address.Addresses` (:func:`envelope_addresses`), kept in its
   :class:`~mailer.mail.message.Mail`; the limiter and the gates count their limit keys.
4. Suppression and unsubscribe take recipients out of the mail (:func:`without_recipients`), by
   limit key, in that structure; the message is built afterwards (again, when it was built to
   be checked), its To and Cc written from the shown forms
   (:func:`~mailer.mail.message.build_message`).
5. :class:`~mailer.guard.sending.Sending` makes the :class:`Envelope` (:func:`envelope_of`): the
   built message with the checked sender and recipients beside it. A transport sends the
   envelope: SMTP gives ``MAIL FROM`` and ``RCPT TO`` the checked addresses as they are (not even
   ``smtplib`` parses them again); SES, Anymail and Django's backends get the recipients from the
   envelope. No transport reads an address out of a header.

A carried message (``mime``, Django's backend: :mod:`mailer.mail.carried`) travels the same
way: its envelope is the call's ``to``, ``cc``, ``bcc`` and ``from_email`` (Django's own
envelope), whatever its headers show.

The readers below are the worker's own check of what it received (a message from another
producer may skip ``delay``): they raise ``InvalidAddress`` / ``InvalidMessage`` naming the
argument, which the guard records as ``dropped`` / ``invalid``. Addresses never appear in the
errors.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
from collections.abc import Mapping, Set
from dataclasses import dataclass, replace
from email.message import EmailMessage
from typing import Any

from mailer.errors import InvalidAddress, InvalidMessage
from mailer.mail.address import (
    DEFAULT_RULES,
    Addresses,
    AddressRules,
    Mailbox,
    mailbox,
    sender_address,
)
from mailer.mail.carried import carried_bytes
from mailer.mail.message import Attachment, Mail, build_message


@dataclass(frozen=True, slots=True)
class Envelope:
    """What a transport sends: ``message`` from ``sender`` to ``recipients``.

    ``sender`` is the ``MAIL FROM`` address (a ``Sender`` header's, else From's);
    ``from_email`` the From as the call gave it (``"Shop <orders@example.org>"``, what an API
    transport posts as the sender); ``to``, ``cc`` and ``bcc`` the checked mailboxes (an API
    transport posts their shown forms; ``bcc`` never appears in the message sent). ``message``
    is what goes on the wire (its ``Bcc`` header, if any, is left out by
    :func:`mailer.mail.transports.base.wire_bytes`): its headers are never read for addresses.
    """

    sender: str
    from_email: str
    to: tuple[Mailbox, ...]
    cc: tuple[Mailbox, ...]
    bcc: tuple[Mailbox, ...]
    message: EmailMessage

    @property
    def recipients(self) -> tuple[str, ...]:
        """The ``RCPT TO`` addresses: to, cc, then bcc."""
        return tuple(box.address for box in (*self.to, *self.cc, *self.bcc))

    @property
    def smtputf8(self) -> bool:
        """True when an envelope address is not ASCII (the server must support SMTPUTF8)."""
        return not all(address.isascii() for address in (self.sender, *self.recipients))

    @property
    def message_id(self) -> str | None:
        """The message's ``Message-ID`` (None without one), for receipts and log lines."""
        value = self.message["Message-ID"]
        return None if value is None else str(value)


def envelope_of(
    mail: Mail, message: EmailMessage | None = None, now: float | None = None
) -> Envelope:
    """The envelope of ``mail``: ``message`` (built from ``mail`` at ``now`` when None) with
    the mail's checked addresses (:attr:`Mail.addresses`; parsed here, once, when the mail has
    none: a ``Mail`` built by hand). Raises ``InvalidAddress`` / ``InvalidMessage``."""
    addresses = mail.addresses or addresses_of(mail)
    built = message if message is not None else build_message(mail, now=now)
    return Envelope(
        sender=addresses.sender,
        from_email=mail.sender,
        to=addresses.to,
        cc=addresses.cc,
        bcc=addresses.bcc,
        message=built,
    )


def addresses_of(mail: Mail, rules: AddressRules = DEFAULT_RULES) -> Addresses:
    """The addresses of a ``Mail`` made without them, each parsed once (see :func:`envelope_of`)."""

    def boxes(values: tuple[str, ...]) -> tuple[Mailbox, ...]:
        return tuple(mailbox(value, rules) for value in values)

    to = mail.to if isinstance(mail.to, tuple) else (mail.to,)
    return envelope_addresses(
        boxes(to), boxes(mail.cc), boxes(mail.bcc), sender_address(mail.sender), mail.headers
    )


def envelope_addresses(
    to: tuple[Mailbox, ...],
    cc: tuple[Mailbox, ...],
    bcc: tuple[Mailbox, ...],
    from_address: str,
    headers: Mapping[str, Any],
) -> Addresses:
    """The mail's :class:`~mailer.mail.address.Addresses`: these mailboxes, sent from a
    ``Sender`` header's address when ``headers`` have one (checked: ``InvalidMessage``), else
    from ``from_address``."""
    given = [v for k, v in headers.items() if isinstance(k, str) and k.lower() == "sender"]
    sender = from_address
    if given and isinstance(given[0], str):
        try:
            sender = mailbox(given[0]).address
        except InvalidAddress as exc:
            raise InvalidMessage(f"header 'Sender': {exc}") from None
    return Addresses(sender, to, cc, bcc, from_address=from_address)


_CHARSET = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,39}")


def addresses(value: Any, name: str) -> list[str]:
    """An address or a list of them as a list (None: empty); raises ``InvalidAddress``."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(a, str) for a in items):
        raise InvalidAddress(f"{name} must be an address or a list of addresses")
    return list(items)


def recipients(value: Any, name: str, rules: AddressRules) -> list[Mailbox]:
    """Each address of argument ``name`` (an address or ``"Name <address>"``): the form its
    header shows (the display name kept, the domain in Punycode) and the normalised recipient
    (for the envelope and the limiter)."""
    return [mailbox(item, rules) for item in addresses(value, name)]


def sender(from_email: Any, default: str, rules: AddressRules) -> str:
    """The From header: ``from_email`` (an address or ``"Name <address>"``, its address
    checked and its domain in Punycode, as recipients' are) or the configured ``default``
    (``MAILGUARD_SENDER``)."""
    return sender_of_call(from_email, default, rules)[0]


def sender_of_call(from_email: Any, default: str, rules: AddressRules) -> tuple[str, str]:
    """``(the From header, its address)``: ``from_email`` parsed once, as :func:`sender`
    checks it, or the configured ``default`` (checked by the settings)."""
    if from_email is None:
        return default, sender_address(default)
    if not isinstance(from_email, str):
        raise InvalidAddress("from_email must be an address")
    shown, recipient = mailbox(from_email, rules)
    return shown, recipient.address


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


def without_recipients(mail: Mail, keys: Set[str], rules: AddressRules = DEFAULT_RULES) -> Mail:
    """``mail`` without the recipients whose limit key is in ``keys``, in its addresses and so
    in the To, Cc and Bcc its message will show (a carried message keeps its headers as the
    application wrote them and loses them from its envelope). A header left empty is not
    written. Nothing is parsed when the mail has its checked addresses (``rules`` derive the
    limit keys of a mail made without them)."""
    addresses = mail.addresses or addresses_of(mail, rules)
    return replace(mail, addresses=addresses.without(keys))
