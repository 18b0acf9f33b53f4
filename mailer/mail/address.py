"""Recipient addresses: validate and normalise an address, and derive its rate-limit key.

The address to send to is normalised only in ways every mail server agrees with (surrounding
whitespace gone, domain lower-cased and IDNA-encoded). The *limit key* goes further so that
``Ada+1@Gmail.com`` and ``a.d.a@googlemail.com`` share one budget; the mail itself still goes to
the address as given.

>>> normalise_address(" Ada+news@Example.COM ")
Recipient(address='Ada+news@example.com', limit_key='ada@example.com', smtputf8=False)

Syntax only: no DNS lookup ever happens, so a valid address may still bounce. What SMTP needs
is checked, not what a public domain needs: a domain without a dot (``root@localhost``,
``ops@mailhost``) is accepted. A bare name without an @-sign (``root``) is not: RFC 5321 wants
``local@domain``, and a bare name is far more often a mistake than a mailbox the relay
qualifies (Django's SMTP backend passes it on; mailguard refuses it at enqueue).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from email.utils import formataddr, getaddresses, parseaddr
from types import MappingProxyType
from typing import NamedTuple

from email_validator import SPECIAL_USE_DOMAIN_NAMES, EmailNotValidError, validate_email
from email_validator.syntax import validate_email_local_part

from mailer.errors import InvalidAddress

#: Longest address in octets (RFC 5321 path limit less the angle brackets).
MAX_ADDRESS_LENGTH = 254
#: Longest local part in octets (RFC 5321).
MAX_LOCAL_LENGTH = 64

#: Providers that ignore dots in the local part (``a.da@gmail.com`` is ``ada@gmail.com``).
DEFAULT_DOTLESS_DOMAINS = frozenset({"gmail.com", "googlemail.com"})
#: Domains that are another name for the same mailboxes.
DEFAULT_DOMAIN_ALIASES: Mapping[str, str] = MappingProxyType({"googlemail.com": "gmail.com"})

_FORBIDDEN = ("\r", "\n", "\0")
# Appended to ``localhost`` and to an admitted reserved domain (``rules.reserved_domains``) for
# email-validator, which refuses special-use names whatever its options; removed afterwards.
_STAND_IN = ".example"
# A host name: dot-separated labels of letters, digits and inner hyphens (after IDNA).
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
# The plain ASCII address (a dot-atom local part, a host name of LDH labels, no "--" anywhere in
# the domain, so no IDNA): decided without email-validator (:func:`_plain`), the same answer.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_PLAIN_RE = re.compile(rf"({_ATEXT}(?:\.{_ATEXT})*)@({_LABEL}(?:\.{_LABEL})*)")
# Parenthesised details from email-validator may quote a domain label; counts are harmless.
_DETAIL_RE = re.compile(r"\s*\((?![0-9]+ (?:character|byte))[^)]*\)")


def _default_aliases() -> Mapping[str, str]:
    return DEFAULT_DOMAIN_ALIASES


@dataclass(frozen=True)
class AddressRules:
    """How the limit key is derived from an address; the address sent to is never changed.

    - ``strip_tags``: drop everything from the first ``tag_separator`` in the local part
      (``ada+1`` -> ``ada``), unless that would leave it empty. On by default.
    - ``lowercase_local``: case-fold the local part. On by default: almost every provider treats
      it case-insensitively, and a stricter key only ever limits more, never less.
    - ``dotless_domains``: domains (after ``domain_aliases``) whose local part dots are dropped.
    - ``domain_aliases``: domain -> canonical domain, e.g. ``googlemail.com`` -> ``gmail.com``.
    - ``allow_smtputf8``: accept non-ASCII local parts (the server must support SMTPUTF8).
    - ``allow_test_domains``: accept the reserved ``.test`` domain (for test suites only).
    - ``reserved_domains``: reserved names (``local``, ``test``, ``corp.local``: special-use
      names or names under one) whose domains are accepted, for an internal relay that
      delivers them (``MAILGUARD_ALLOW_RESERVED_DOMAINS``). Empty by default: refused.

    Do not use these rules to decide where mail goes: they merge mailboxes that some providers
    keep apart, which is right for a budget and wrong for delivery.
    """

    strip_tags: bool = True
    tag_separator: str = "+"
    lowercase_local: bool = True
    dotless_domains: frozenset[str] = DEFAULT_DOTLESS_DOMAINS
    domain_aliases: Mapping[str, str] = field(default_factory=_default_aliases, hash=False)
    allow_smtputf8: bool = True
    allow_test_domains: bool = False
    reserved_domains: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if len(self.tag_separator) != 1 or self.tag_separator in "@.\r\n\0 ":
            raise ValueError("tag_separator must be one character other than '@', '.' or space")
        # Copies, so a caller changing its own set or dict later cannot change the rules.
        domains: Iterable[str] = self.dotless_domains
        object.__setattr__(self, "dotless_domains", frozenset(d.lower() for d in domains))
        reserved: Iterable[str] = self.reserved_domains
        object.__setattr__(
            self, "reserved_domains", frozenset(d.strip(".").lower() for d in reserved)
        )
        aliases = {k.lower(): v.lower() for k, v in self.domain_aliases.items()}
        object.__setattr__(self, "domain_aliases", MappingProxyType(aliases))


DEFAULT_RULES = AddressRules()


@dataclass(frozen=True, slots=True)
class Recipient:
    """A validated recipient.

    ``address`` is what to send to: ASCII with a Punycode domain whenever the local part is
    ASCII, else the Unicode form (then ``smtputf8`` is true and the server must support it).
    ``limit_key`` is what the rate limiter counts; it is not an address to send to.
    """

    address: str
    limit_key: str
    smtputf8: bool


def normalise_address(text: str, rules: AddressRules = DEFAULT_RULES) -> Recipient:
    """Validate ``text`` as a recipient address and return the normalised :class:`Recipient`.

    Surrounding whitespace is removed; CR, LF and NUL anywhere are refused. Lengths are counted
    in UTF-8 octets after normalisation: at most 254 for the address, 64 for the local part.
    Display names (``Ada <ada@example.com>``), quoted local parts and IP-literal domains are
    refused. Normalising a normalised address returns it unchanged.

    Raises :class:`~mailer.errors.InvalidAddress` with a message that does not contain the
    address.
    """
    if not isinstance(text, str):
        raise InvalidAddress(f"address must be a str, got {type(text).__name__}")
    for char in _FORBIDDEN:
        if char in text:
            raise InvalidAddress(f"address contains a forbidden control character {char!r}")
    stripped = text.strip()
    _precheck(stripped)
    local, domain, address, smtputf8 = _validate(stripped, rules)
    if len(address.encode("utf-8")) > MAX_ADDRESS_LENGTH:
        raise InvalidAddress(f"address is longer than {MAX_ADDRESS_LENGTH} octets")
    if len(local.encode("utf-8")) > MAX_LOCAL_LENGTH:
        raise InvalidAddress(f"local part is longer than {MAX_LOCAL_LENGTH} octets")
    return Recipient(address=address, limit_key=limit_key(local, domain, rules), smtputf8=smtputf8)


def _validate(text: str, rules: AddressRules) -> tuple[str, str, str, bool]:
    """``(local part, lower-case ASCII domain, address to send to, needs SMTPUTF8)`` for a
    pre-checked ``text``.

    A domain without a dot passes (a relay delivers ``ops@mailhost``); so does ``localhost``
    (Django's default senders), which email-validator refuses as a special-use name.
    """
    plain = _plain(text, rules)
    return plain if plain is not None else _by_validator(text, rules)


def _by_validator(text: str, rules: AddressRules) -> tuple[str, str, str, bool]:
    """:func:`_validate` by email-validator: any address."""
    domain = text.rpartition("@")[2]
    stand_in = domain.lower() == "localhost" or _admitted(domain.lower(), rules)
    try:
        valid = validate_email(
            f"{text}{_STAND_IN}" if stand_in else text,
            check_deliverability=False,
            allow_smtputf8=rules.allow_smtputf8,
            allow_quoted_local=False,
            allow_domain_literal=False,
            allow_display_name=False,
            allow_empty_local=False,
            test_environment=rules.allow_test_domains,
            globally_deliverable=False,
        )
    except EmailNotValidError as exc:
        reason = _safe_reason(str(exc), text)
        if "special-use" in reason:  # an internal relay's .local: the setting that admits it
            reason += " (MAILGUARD_ALLOW_RESERVED_DOMAINS admits such names for an internal relay)"
        raise InvalidAddress(reason) from None
    address = valid.ascii_email or valid.normalized
    domain = valid.ascii_domain.lower()
    if domain.rpartition(".")[2].isdigit():  # 10.0.0.1 is an IP address, not a host name
        raise InvalidAddress("address is not valid: the part after the @-sign is not a host name")
    if stand_in:
        address, domain = address[: -len(_STAND_IN)], domain[: -len(_STAND_IN)]
    return valid.local_part, domain, address, valid.ascii_email is None


def _plain(text: str, rules: AddressRules) -> tuple[str, str, str, bool] | None:
    """:func:`_validate`'s answer for a plain ASCII address, a quarter of email-validator's
    time; None for anything else (email-validator decides): a special-use domain
    (``localhost``, ``.test``, ...), a numeric last label, a "--" in the domain (IDNA)."""
    match = _PLAIN_RE.fullmatch(text)
    if match is None:
        return None
    local, domain = match.group(1), match.group(2).lower()
    last = domain.rpartition(".")[2]
    if "--" in domain or len(domain) > 253 or last.isdigit():
        return None
    for special in SPECIAL_USE_DOMAIN_NAMES:
        if (domain == special or domain.endswith("." + special)) and not _admitted(domain, rules):
            return None
    return local, domain, f"{local}@{domain}", False


def _admitted(domain: str, rules: AddressRules) -> bool:
    """True when the lower-case ``domain`` is under a reserved name ``rules`` admit."""
    admitted = rules.reserved_domains | ({"test"} if rules.allow_test_domains else set())
    return any(domain == name or domain.endswith("." + name) for name in admitted)


def reserved_suffix_problem(suffix: str) -> str | None:
    """Why ``suffix`` cannot be admitted as a reserved domain (one line), or None: it must be
    a special-use name (``local``, ``test``, ...) or a host name under one (``corp.local``)."""
    name = suffix.strip(".").lower()
    under = [s for s in SPECIAL_USE_DOMAIN_NAMES if name == s or name.endswith("." + s)]
    if not _HOST_RE.fullmatch(name) or not under:
        return (
            f"{suffix!r:.60} is not a reserved name ({', '.join(SPECIAL_USE_DOMAIN_NAMES)}, or a "
            "name under one such as corp.local); other domains are accepted without this setting"
        )
    return None


class Mailbox(NamedTuple):
    """An address as a header shows it (``shown``: ``"Ada <ada@xn--4ca9at.com>"`` or the
    address alone) and the checked :class:`Recipient` it names (what the envelope and the
    limiter use). Made by :func:`mailbox`, the one parse of an address text."""

    shown: str
    recipient: Recipient

    @property
    def address(self) -> str:
        """The address to send to (``Recipient.address``)."""
        return self.recipient.address


def mailbox(text: str, rules: AddressRules = DEFAULT_RULES) -> Mailbox:
    """An address or ``"Name <address>"``: ``(the form headers show, the recipient)``.

    The form keeps the display name and puts the normalised address in it (its domain in
    Punycode: ``"Ada <ada@xn--4ca9at.com>"``); the recipient is what the envelope and the
    limiter use. Raises :class:`~mailer.errors.InvalidAddress` (never quoting the text),
    for several addresses in one text too.
    """
    if not isinstance(text, str):
        raise InvalidAddress(f"address must be a str, got {type(text).__name__}")
    name, address = split_display_name(text)
    recipient = normalise_address(address, rules)
    return Mailbox(shown(name, recipient.address), recipient)


def split_display_name(text: str) -> tuple[str, str]:
    """``(display name, address)`` of ``"Name <address>"`` or of an address (name ``""``);
    ``InvalidAddress`` for anything else (two addresses, a comment, junk around it)."""
    if any(char in text for char in _FORBIDDEN):
        raise InvalidAddress("address contains a forbidden control character")
    stripped = text.strip()
    if "<" not in stripped:  # an address alone: normalise_address says precisely what is wrong
        return "", stripped
    pairs = getaddresses([stripped])
    if len(pairs) != 1:
        raise InvalidAddress('give one address or "Name <address>", not several')
    name, address = pairs[0]
    if not address or not stripped.endswith(f"<{address}>"):
        raise InvalidAddress('address is neither an address nor "Name <address>"')
    return name, address


def shown(name: str, address: str) -> str:
    """``"Name <address>"`` as a header shows it (the name quoted when it must be), or the
    address alone without a name. A non-ASCII name stays Unicode: the header encodes it."""
    if not name:
        return address
    if name.isascii():
        return formataddr((name, address))
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{quoted}" <{address}>'


@dataclass(frozen=True, slots=True)
class Addresses:
    """A mail's envelope as the worker checked it, once: ``sender`` (the address ``MAIL FROM``
    gives) and the :class:`Mailbox` of each ``to``, ``cc`` and ``bcc`` address, in order."""

    sender: str
    to: tuple[Mailbox, ...] = ()
    cc: tuple[Mailbox, ...] = ()
    bcc: tuple[Mailbox, ...] = ()
    #: The From header's address (the Message-ID's domain); "": read from the From text.
    from_address: str = ""

    @property
    def mailboxes(self) -> tuple[Mailbox, ...]:
        """Every recipient's mailbox: to, then cc, then bcc."""
        return (*self.to, *self.cc, *self.bcc)

    def without(self, keys: Set[str]) -> Addresses:
        """These addresses without the recipients whose limit key is in ``keys``."""

        def kept(boxes: tuple[Mailbox, ...]) -> tuple[Mailbox, ...]:
            return tuple(box for box in boxes if box.recipient.limit_key not in keys)

        return Addresses(
            self.sender, kept(self.to), kept(self.cc), kept(self.bcc), self.from_address
        )


@functools.lru_cache(maxsize=64)  # a few senders, asked for every mail
def sender_address(text: str) -> str:
    """The address of a sender text already checked (:func:`check_sender`: the configured
    ``MAILGUARD_SENDER``, an address or ``"Name <address>"``): parsed once per process."""
    return parseaddr(text.strip())[1]


def check_sender(text: str) -> None:
    """Check a From value: an address or ``"Name <address>"``, one line, whose domain is any
    host name (``localhost`` and reserved names such as ``.test`` included: a sender is the
    operator's, and development servers use them). Raises
    :class:`~mailer.errors.InvalidAddress` with a reason that does not repeat the text.
    """
    if not isinstance(text, str):
        raise InvalidAddress(f"sender must be a str, got {type(text).__name__}")
    if any(char in text for char in _FORBIDDEN):
        raise InvalidAddress("sender contains a forbidden control character")
    stripped = text.strip()
    _, address = parseaddr(stripped)
    if not address or (stripped != address and not stripped.endswith(f"<{address}>")):
        raise InvalidAddress("it is neither")
    _precheck(address)
    local, _, domain = address.rpartition("@")
    try:
        validate_email_local_part(local, allow_smtputf8=True, quoted_local_part=False)
    except EmailNotValidError as exc:
        raise InvalidAddress(_safe_reason(str(exc), address)) from None
    try:
        host = domain.encode("idna").decode("ascii")
    except UnicodeError:
        host = ""
    if len(address) > MAX_ADDRESS_LENGTH or not _HOST_RE.fullmatch(host):
        raise InvalidAddress("the part after the @-sign is not a host name")


def limit_key(local: str, domain: str, rules: AddressRules = DEFAULT_RULES) -> str:
    """Return the rate-limit key of an already validated ``local@domain`` under ``rules``.

    ``domain`` should be the lower-case ASCII (Punycode) domain, as in :class:`Recipient`.
    """
    domain = rules.domain_aliases.get(domain, domain)
    if rules.strip_tags:
        head = local.split(rules.tag_separator, 1)[0]
        local = head or local
    if rules.lowercase_local:
        local = local.casefold()
    if domain in rules.dotless_domains:
        local = local.replace(".", "") or local
    return f"{local}@{domain}"


def _precheck(text: str) -> None:
    """Refuse the common mistakes with precise messages before the full validator runs."""
    if not text:
        raise InvalidAddress("address is empty")
    if len(text) > MAX_ADDRESS_LENGTH:
        # Characters are never fewer than octets, so this is already too long in octets.
        raise InvalidAddress(f"address is longer than {MAX_ADDRESS_LENGTH} octets")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidAddress("address contains a lone surrogate (not valid Unicode)") from None
    if "@" not in text:
        raise InvalidAddress("address has no @-sign")
    local, _, domain = text.rpartition("@")
    if not local:
        raise InvalidAddress("local part (before the @-sign) is empty")
    if not domain:
        raise InvalidAddress("domain part (after the @-sign) is empty")


def _safe_reason(reason: str, address: str) -> str:
    """Return email-validator's ``reason`` without anything that could quote the address."""
    reason = _DETAIL_RE.sub("", reason)
    local, _, domain = address.rpartition("@")
    leaks = [part for part in (address, local, domain) if len(part) >= 3 and part in reason]
    if leaks:
        return "address is not valid"
    return f"address is not valid: {reason[:1].lower()}{reason[1:]}"
