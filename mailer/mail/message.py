"""Outgoing mails: the :class:`Mail` data and how it becomes an ``EmailMessage``.

A ``Mail`` carries already rendered text; building checks every header value for CR, LF, NUL
and other line breaks (header injection) and every field against :class:`MessageLimits`. The
``Message-ID`` comes from the mail id, so a mail sent twice by a redelivered task carries the
same id both times and the duplicate can be recognised downstream; a ``Message-ID`` the caller
gives in ``headers`` (a thread's own ids) is kept instead, and so is a ``Date``. The parts are
written as Django writes them (:mod:`mailer.mail.mime`). A mail that carries a whole message
(``Mail.carried``: Django's backend's, :mod:`mailer.mail.carried`) is sent as those bytes, with
its own Message-ID and Date.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate, parseaddr, parsedate_to_datetime
from types import MappingProxyType

from mailer.errors import InvalidAddress, InvalidMessage
from mailer.mail.address import Addresses, mailbox
from mailer.mail.carried import carried_message, carried_message_id
from mailer.mail.mime import POLICY, file_part, set_text, text_part

#: Used in the Message-ID when the sender has no usable domain.
FALLBACK_DOMAIN = "mailguard.invalid"

#: Headers the builder sets itself, or that would add recipients behind the limiter's back.
RESERVED_HEADERS = frozenset(
    {
        "bcc",
        "cc",
        "content-transfer-encoding",
        "content-type",
        "from",
        "mime-version",
        "resent-bcc",
        "resent-cc",
        "resent-to",
        "subject",
        "to",
    }
)

# NUL and everything str.splitlines() treats as a line break: the email package refuses them in
# headers, and a bare CR or LF is how header injection starts.
_FORBIDDEN = ("\r", "\n", "\0", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
# RFC 5322 field names: printable ASCII except the colon.
_HEADER_NAME_RE = re.compile(r"^[!-9;-~]+$")
# One side of a MIME type (RFC 2045 token, lower case).
_MIME_PART = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")
# Characters kept as they are in the id part of a Message-ID (a subset of dot-atom text).
_ID_UNSAFE_RE = re.compile(r"[^A-Za-z0-9_\-]")
# A Message-ID a caller gives: <left@right>, printable ASCII without spaces or brackets inside.
_MESSAGE_ID_RE = re.compile(r"^<[!-;=?-~]+@[!-;=?-~]+>$")
# Headers that hold URIs (RFC 2369, RFC 8058) or message ids (RFC 5322 3.6.4): ASCII only, no
# encoded word is read in them.
_ASCII_HEADERS = frozenset(
    {"list-unsubscribe", "list-unsubscribe-post", "list-help", "list-subscribe", "list-post"}
    | {"list-owner", "list-archive", "references", "in-reply-to"}
)
# Where a header may be folded (mailer.mail.mime.fold_at_spaces), and the longest word a line
# of 998 characters holds after the fold's space.
_FOLD_SPACE = re.compile(r"[ \t]+")
_LONGEST_WORD = 997
_DOMAIN_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$")


def _no_headers() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MessageLimits:
    """Size caps checked when a message is built.

    Subject and header values in characters (998 is the RFC 5322 line limit), bodies in UTF-8
    bytes each (text and HTML separately; 1 MiB by default). Raise them only if the mail
    server accepts larger messages.
    """

    max_subject_chars: int = 998
    max_header_chars: int = 998
    max_headers: int = 50
    max_body_bytes: int = 1024 * 1024


DEFAULT_LIMITS = MessageLimits()


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file attached to a mail: its name (``""``: none), its bytes and its MIME type
    (``text/csv``); for text, the ``charset`` its bytes are in (``utf-8`` when None); an
    ``inline`` part (an image the HTML shows) and its ``content_id`` (``<logo@shop>``, what
    ``cid:logo@shop`` refers to)."""

    filename: str
    content: bytes
    mimetype: str = "application/octet-stream"
    charset: str | None = None
    inline: bool = False
    content_id: str | None = None


@dataclass(frozen=True, slots=True)
class Mail:
    """One mail, with its text already rendered.

    ``to`` is the normalised address (``Recipient.address``), or several; ``cc`` and ``bcc``
    more envelope recipients (Bcc never appears in the headers sent), ``reply_to`` the
    Reply-To addresses. ``mail_id`` is the stable id of the ``send_mail`` call (at most 255
    characters). ``sender`` is the From header, an address or ``"Name <address>"``.
    ``headers`` are extra headers such as ``List-Unsubscribe``; the reserved ones
    (:data:`RESERVED_HEADERS`) are refused. ``charset`` is the body's (and HTML's): ``utf-8``
    unless the caller asks for another. A ``html`` with an empty ``body`` is sent alone, as a
    ``text/html`` message (Django's ``content_subtype = "html"``).

    ``carried`` is a whole message built elsewhere (:mod:`mailer.mail.carried`, Django's
    backend): it is sent as it is, to ``to``, ``cc`` and ``bcc`` from ``sender``'s address;
    ``subject``, ``body``, ``html``, ``headers``, ``reply_to`` and ``attachments`` are then empty.

    ``addresses`` is the envelope as the worker checked it
    (:class:`~mailer.mail.address.Addresses`): when given, ``to``, ``cc`` and ``bcc`` are its
    mailboxes' shown forms, and nothing parses an address of this mail again
    (:func:`mailer.mail.envelope.envelope_of`); None: they are parsed from ``to``, ``cc``,
    ``bcc`` and ``sender`` when the envelope is made.
    """

    to: str | tuple[str, ...]
    subject: str
    body: str
    mail_id: str
    sender: str
    html: str | None = None
    headers: Mapping[str, str] = field(default_factory=_no_headers, hash=False)
    cc: tuple[str, ...] = ()
    bcc: tuple[str, ...] = ()
    reply_to: tuple[str, ...] = ()
    attachments: tuple[Attachment, ...] = ()
    charset: str = "utf-8"
    carried: bytes | None = field(default=None, repr=False)
    addresses: Addresses | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # A copy, so the caller's dict cannot change a frozen Mail afterwards.
        object.__setattr__(self, "headers", MappingProxyType(dict(self.headers)))
        if isinstance(self.to, str):
            object.__setattr__(self, "to", (self.to,))
        if self.addresses is not None:  # one source: the checked envelope
            for name in ("to", "cc", "bcc"):
                boxes = getattr(self.addresses, name)
                object.__setattr__(self, name, tuple(box.shown for box in boxes))


def message_id(mail_id: str, sender: str) -> str:
    """Return the ``Message-ID`` for ``mail_id``: ``<{id}@{sender's domain}>``.

    The same mail id always gives the same Message-ID. Characters outside ``A-Z a-z 0-9 _ -``
    become ``_`` and a short hash of the original id is appended, so different ids never
    share a Message-ID. Without a usable sender domain, ``mailguard.invalid`` is used.
    """
    if not isinstance(mail_id, str) or not mail_id or len(mail_id) > 255:
        raise InvalidMessage("mail_id must be a str of 1 to 255 characters")
    _check_header_value("mail_id", mail_id, 255)
    local = _ID_UNSAFE_RE.sub("_", mail_id)
    if local != mail_id:
        digest = hashlib.blake2b(mail_id.encode("utf-8", "surrogatepass"), digest_size=4)
        local = f"{local}.{digest.hexdigest()}"
    return f"<{local}@{_sender_domain(sender)}>"


def build_message(
    mail: Mail, *, limits: MessageLimits = DEFAULT_LIMITS, now: float | None = None
) -> EmailMessage:
    """Build the ``EmailMessage`` for ``mail``: text/plain, or multipart/alternative with HTML.

    ``now`` (seconds since the epoch, from the caller's clock) sets the ``Date`` header; without
    it there is no ``Date`` and the submission server adds one. Raises
    :class:`~mailer.errors.InvalidMessage` naming the bad field, never quoting its content.
    """
    to = check_mail(mail, limits)
    if mail.carried is not None:
        return _carried(mail, now)
    message = EmailMessage(policy=POLICY)
    message["From"] = mail.sender
    _add_addresses(message, mail, to)
    message["Subject"] = mail.subject
    given = {name.lower() for name in mail.headers}
    if "message-id" not in given:
        message["Message-ID"] = message_id(mail.mail_id, _from_address(mail))
    if now is not None and "date" not in given:
        message["Date"] = formatdate(now, usegmt=True)
    for name, given_value in mail.headers.items():
        # Sender is the envelope sender: its domain in Punycode, as From's.
        value = mailbox(given_value)[0] if name.lower() == "sender" else given_value
        try:
            message[name] = value
        except (ValueError, TypeError, IndexError):
            # The header registry parses structured headers such as Reply-To.
            raise InvalidMessage(f"header {name!r} has a value that cannot be parsed") from None
    _add_body(message, mail)
    return message


def _carried(mail: Mail, now: float | None) -> EmailMessage:
    """A carried message, parsed; a ``Message-ID`` (from the mail id) and a ``Date`` added only
    when it has none (Django's messages have both). Its envelope is the mail's, never its
    headers (:func:`mailer.mail.envelope.envelope_of`)."""
    message = carried_message(mail.carried or b"")
    if "Message-ID" not in message:
        message["Message-ID"] = message_id(mail.mail_id, _from_address(mail))
    if now is not None and "Date" not in message:
        message["Date"] = formatdate(now, usegmt=True)
    return message


def mail_message_id(mail: Mail) -> str:
    """The Message-ID ``mail`` is sent with: a carried message's own, the caller's header,
    else :func:`message_id`."""
    if mail.carried is not None:
        return carried_message_id(mail.carried) or message_id(mail.mail_id, _from_address(mail))
    for name, value in mail.headers.items():
        if name.lower() == "message-id":
            return value.strip()
    return message_id(mail.mail_id, _from_address(mail))


def _from_address(mail: Mail) -> str:
    """The From address the worker checked (no parse), else the From text as given."""
    checked = mail.addresses.from_address if mail.addresses is not None else ""
    return checked or mail.sender


def _add_body(message: EmailMessage, mail: Mail) -> None:
    """The text (and HTML) parts, then inline parts beside the HTML, then attachments."""
    html_only = mail.html is not None and not mail.body
    html_part = message
    try:
        if html_only:
            set_text(message, mail.html or "", "html", mail.charset)
        else:
            set_text(message, mail.body, "plain", mail.charset)
            if mail.html is not None:
                message.make_alternative()
                html_part = text_part(mail.html, "html", mail.charset)
                message.attach(html_part)
    except (UnicodeError, LookupError):
        raise InvalidMessage(f"body: not writable in charset {mail.charset!r:.40}") from None
    inline = [a for a in mail.attachments if a.inline] if mail.html is not None else []
    if inline:
        html_part.make_related()
        for attachment in inline:
            html_part.attach(_part(attachment))
    others = [a for a in mail.attachments if a not in inline]
    if others:
        message.make_mixed()
        for attachment in others:
            message.attach(_part(attachment))


def check_mail(mail: Mail, limits: MessageLimits = DEFAULT_LIMITS) -> tuple[str, ...]:
    """Every check :func:`build_message` makes before it builds, without building (a small
    part of its cost); returns the ``To`` addresses. Raises :class:`~mailer.errors.InvalidMessage`.

    Passing it means :func:`build_message` will not raise, unless :func:`needs_build_to_check`.
    """
    to = mail.to if isinstance(mail.to, tuple) else (mail.to,)
    if mail.carried is not None:
        _check_carried(mail, limits)
        return to
    if to or not (mail.cc or mail.bcc):
        _check_header_value("to", ", ".join(to), limits.max_header_chars)
    for name, values in (("cc", mail.cc), ("bcc", mail.bcc), ("reply_to", mail.reply_to)):
        if values:
            _check_header_value(name, ", ".join(values), limits.max_header_chars)
    _check_header_value("sender", mail.sender, limits.max_header_chars)
    _check_header_value("subject", mail.subject, limits.max_subject_chars)
    _check_body("body", mail.body, limits.max_body_bytes)
    if mail.html is not None:
        _check_body("html", mail.html, limits.max_body_bytes)
    if len(mail.headers) > limits.max_headers:
        raise InvalidMessage(f"headers: more than {limits.max_headers} extra headers")
    for name, value in mail.headers.items():
        check_extra_header(name, value, limits.max_header_chars)
    message_id(mail.mail_id, _from_address(mail))
    return to


def needs_build_to_check(mail: Mail) -> bool:
    """True when only building ``mail`` tells whether it is valid: extra headers (the header
    registry parses structured ones such as Reply-To), attachments (MIME types, file names) or
    a carried message (its parts)."""
    return bool(mail.headers or mail.attachments or mail.reply_to or mail.carried is not None)


def _check_carried(mail: Mail, limits: MessageLimits) -> None:
    """A carried message's mail: the envelope's addresses, and nothing beside the message."""
    for name, values in (("to", mail.to), ("cc", mail.cc), ("bcc", mail.bcc)):
        for value in values:
            _check_header_value(name, value, limits.max_header_chars)
    _check_header_value("sender", mail.sender, limits.max_header_chars)
    if mail.subject or mail.body or mail.html is not None or mail.headers or mail.reply_to:
        raise InvalidMessage("mime: a carried message takes no subject, body, html, headers")
    if mail.attachments:
        raise InvalidMessage("mime: a carried message takes no attachments: attach them to it")
    message_id(mail.mail_id, _from_address(mail))


def _add_addresses(message: EmailMessage, mail: Mail, to: tuple[str, ...]) -> None:
    # No To (cc or bcc only): the RFC 5322 empty group, as mail clients write it.
    message["To"] = ", ".join(to) if to else "undisclosed-recipients:;"
    if mail.cc:
        message["Cc"] = ", ".join(mail.cc)
    if mail.bcc:  # for the envelope only: smtplib's send_message strips it from what it sends
        message["Bcc"] = ", ".join(mail.bcc)
    if mail.reply_to:
        if any(name.lower() == "reply-to" for name in mail.headers):
            raise InvalidMessage("reply_to given twice: as an argument and as a header")
        message["Reply-To"] = ", ".join(mail.reply_to)


def _part(attachment: Attachment) -> EmailMessage:
    if attachment.filename:
        _check_header_value("attachment filename", attachment.filename, 255)
    if attachment.content_id is not None and not _MESSAGE_ID_RE.match(attachment.content_id):
        raise InvalidMessage("attachment content id must be <left@right>")
    maintype, _, subtype = attachment.mimetype.lower().partition("/")
    if not _MIME_PART.match(maintype) or not _MIME_PART.match(subtype):
        raise InvalidMessage("attachment mimetype must be type/subtype such as text/csv")
    try:
        return file_part(
            attachment.content,
            f"{maintype}/{subtype}",
            attachment.filename,
            charset=attachment.charset,
            inline=attachment.inline,
            content_id=attachment.content_id,
        )
    except (ValueError, TypeError, IndexError, LookupError):
        raise InvalidMessage(f"attachment of type {maintype}/{subtype}: bad content") from None


def _check_header_value(name: str, value: object, max_chars: int) -> None:
    if not isinstance(value, str):
        raise InvalidMessage(f"{name} must be a str, got {type(value).__name__}")
    for char in _FORBIDDEN:
        if char in value:
            raise InvalidMessage(f"{name} contains a forbidden control character {char!r}")
    if len(value) > max_chars:
        raise InvalidMessage(f"{name} is longer than {max_chars} characters")
    if not value.strip() and name != "subject":
        raise InvalidMessage(f"{name} is empty")


def check_extra_header(name: object, value: object, max_chars: int = 998) -> None:
    """Raise ``InvalidMessage`` unless ``name: value`` may be given as an extra header: an RFC
    5322 field name that is not reserved (:data:`RESERVED_HEADERS`), a one-line str value; a
    ``Message-ID`` of the form ``<left@right>``, a ``Date`` as RFC 5322 writes one, a
    ``Sender`` (the envelope sender) an address or ``"Name <address>"``; a header holding URIs
    or message ids (``List-Unsubscribe``, the other RFC 2369 ones, ``References``,
    ``In-Reply-To``) in ASCII."""
    _check_header_name(name)
    _check_header_value(f"header {name!r}", value, max_chars)
    assert isinstance(name, str) and isinstance(value, str)  # checked just above
    lower = name.lower()
    if lower in _ASCII_HEADERS:
        _check_unencoded(name, value)
    if lower == "message-id" and not _MESSAGE_ID_RE.match(value.strip()):
        raise InvalidMessage("header 'Message-ID' must be <left@right>")
    if lower == "date":
        try:
            parsedate_to_datetime(value)
        except (ValueError, TypeError, IndexError):
            raise InvalidMessage("header 'Date' is not an RFC 5322 date") from None
    if lower == "sender":
        try:
            mailbox(value)
        except InvalidAddress as exc:
            raise InvalidMessage(f"header 'Sender': {exc}") from None


def _check_unencoded(name: str, value: str) -> None:
    """A header no encoded word may stand in: ASCII, each word short enough for a line of its
    own (it is folded at its spaces only, :func:`mailer.mail.mime.fold_at_spaces`)."""
    if not value.isascii():
        raise InvalidMessage(
            f"header {name!r} must be ASCII: it holds URIs or message ids (percent-encode a "
            "URI's other characters, RFC 3986)"
        )
    if len(value) > _LONGEST_WORD and max(map(len, _FOLD_SPACE.split(value))) > _LONGEST_WORD:
        raise InvalidMessage(
            f"header {name!r} has a word of more than {_LONGEST_WORD} characters: no line of "
            "998 (RFC 5322) holds it"
        )


def _check_header_name(name: object) -> None:
    if not isinstance(name, str) or not _HEADER_NAME_RE.match(name) or len(name) > 76:
        raise InvalidMessage("header names must be 1 to 76 printable ASCII characters, no colon")
    if name.lower() in RESERVED_HEADERS:
        raise InvalidMessage(f"header {name!r} is set by mailguard and cannot be given")


def _check_body(name: str, value: object, max_bytes: int) -> None:
    if not isinstance(value, str):
        raise InvalidMessage(f"{name} must be a str, got {type(value).__name__}")
    if "\0" in value:
        raise InvalidMessage(f"{name} contains a NUL character")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidMessage(f"{name} is not valid Unicode (lone surrogate)") from None
    if size > max_bytes:
        raise InvalidMessage(f"{name} is larger than {max_bytes} bytes")


@functools.lru_cache(maxsize=64)  # a few senders, asked for every mail
def _sender_domain(sender: str) -> str:
    """The lower-case ASCII domain of the sender's address (an address alone is not parsed), or
    the fallback domain."""
    bare = sender.strip()
    address = bare if not any(c in bare for c in "<( ") else parseaddr(sender)[1]
    if "@" not in address:
        return FALLBACK_DOMAIN
    domain = address.rpartition("@")[2].strip().lower()
    if domain and not domain.isascii():
        try:
            domain = domain.encode("idna").decode("ascii")
        except UnicodeError:
            return FALLBACK_DOMAIN
    return domain if _DOMAIN_RE.match(domain) else FALLBACK_DOMAIN
