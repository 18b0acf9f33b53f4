"""MIME parts as Django builds them: text bodies, attachments, and how headers are encoded.

A mail's parts follow what Django's own backends send, so a project that moves to mailguard
sends the same bytes: a text part is ``7bit`` when ASCII, ``8bit`` otherwise, and
``quoted-printable`` when a line is longer than 998 octets (RFC 5322); it ends where its text
ends (no newline added). A header with non-ASCII text is one RFC 2047 encoded word per line
(``Subject: =?utf-8?q?Ch=C3=A8re_maman?=``), a display name likewise, as Django writes them. A
header whose text is ASCII (``List-Unsubscribe``, ``References``, ``List-Id``, any caller's
header holding URIs or addresses) is not encoded: it is folded at its white space (RFC 5322
2.2.3), lines of at most 78 characters where its words allow, a longer word (a long URL) on a
line of its own, whole (``email.policy.default`` turns such a word into encoded words to break
it, which RFC 2369 and RFC 8058 readers do not decode). Only a word that fits no line of 998
characters is still encoded, where RFC 2047 allows it (``Subject``); a URI header holding one
is refused when the mail is checked. A non-ASCII ``List-Id`` has its phrase encoded, its
``<list id>`` as it is (RFC 2919).

Attachments keep what they say about themselves: a text attachment its charset, an inline image
its ``Content-ID`` and ``inline`` disposition, a ``message/rfc822`` attachment its message
unencoded (RFC 2046 5.2.1: never base64).
"""

from __future__ import annotations

import email
import re
import sys
from email import charset as charsets
from email.charset import Charset
from email.header import Header
from email.headerregistry import BaseHeader, HeaderRegistry, UnstructuredHeader
from email.message import EmailMessage
from email.policy import EmailPolicy, Policy
from email.utils import formataddr
from typing import Any

#: RFC 5322's longest line in octets; a text with a longer line goes quoted-printable.
MAX_LINE_OCTETS = 998
#: RFC 5322's line limit in characters, CRLF not counted: no folding writes a longer line.
MAX_LINE_CHARS = 998
_ADDRESS_HEADERS = frozenset({"from", "to", "cc", "reply-to", "sender"})
# "Name:", then each run of white space with the word after it (where a fold may go).
_FOLD_POINTS = re.compile(r"[ \t]+[^ \t]*|[^ \t]+")
# A List-Id (RFC 2919): a phrase, then the list's id in angle brackets (ASCII).
_LIST_ID = re.compile(r"^(.*\S)[ \t]*(<[!-;=?-~]+>)[ \t]*$")


class FoldedHeader(BaseHeader):
    """The base of every header class mailguard's policies make: an unstructured header whose
    text is ASCII is folded at its white space (:func:`fold_at_spaces`), not encoded, unless a
    word of it fits no line of :data:`MAX_LINE_CHARS` (then ``email`` encodes it to break it:
    allowed in ``Subject``, refused at the check in URI headers). Any other header is folded as
    ``email`` folds it. A parsed header that is refolded (a source line over 78 characters)
    goes through here too, so a message parsed and written again keeps its form."""

    def fold(self, *, policy: Policy) -> str:
        text = str(self)
        if isinstance(self, UnstructuredHeader) and text.isascii():
            folded = fold_at_spaces(self.name, text, policy.linesep, policy.max_line_length)
            lines = folded.split(policy.linesep)
            if max(len(line) for line in lines) <= MAX_LINE_CHARS:
                return folded
        return super().fold(policy=policy)


def fold_at_spaces(name: str, value: str, linesep: str, width: int | None = 78) -> str:
    """``name: value`` and ``linesep``, folded as RFC 5322 2.2.3 folds: a line break before white
    space only, so unfolding gives back ``value`` exactly. A line ends before the word that would
    take it past ``width`` characters (None or 0: never folded); a longer word stays whole on a
    line of its own (the first word on the name's line while that line stays within
    :data:`MAX_LINE_CHARS`). White space at the end stays on the last line (no blank line)."""
    segments = _FOLD_POINTS.findall(f"{name}: {value}")
    lines = [segments[0]]
    limit = width or sys.maxsize
    for segment in segments[1:]:
        room = MAX_LINE_CHARS if len(lines) == 1 and lines[0] == segments[0] else limit
        if len(lines[-1]) + len(segment) <= room or not segment.strip():
            lines[-1] += segment
        else:
            lines.append(segment)
    return linesep.join(lines) + linesep


class MadeOnceRegistry(HeaderRegistry):
    """``email``'s header registry, each header class made once: the standard one makes a new
    class (``type(...)``) for every header of every message, most of a short mail's build time.
    The classes hold no state; their instances are the headers. Their base is
    :class:`FoldedHeader`."""

    def __init__(self) -> None:
        super().__init__(base_class=FoldedHeader)
        self._made: dict[str, type] = {}

    def __getitem__(self, name: str) -> type:
        key = name.lower()
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = super().__getitem__(name)
        return made

    def map_to_type(self, name: str, cls: type) -> None:
        super().map_to_type(name, cls)
        self._made.pop(name.lower(), None)


class DjangoLikePolicy(EmailPolicy):
    """``email.policy.default`` that writes a non-ASCII header as Django does: the whole text
    one encoded word (per folded line), each non-ASCII display name one encoded word; an ASCII
    unstructured header folded at its white space (:class:`FoldedHeader`)."""

    def fold(self, name: str, value: Any) -> str:
        folded = _encoded(name, value, self.linesep)
        return folded if folded is not None else super().fold(name, value)

    def fold_binary(self, name: str, value: Any) -> bytes:
        folded = _encoded(name, value, self.linesep)
        if folded is None:
            return super().fold_binary(name, value)
        return folded.encode("ascii")


#: The policy of every message mailguard builds (``email.policy.default`` otherwise).
POLICY = DjangoLikePolicy(header_factory=MadeOnceRegistry())

#: The policy of a message carried whole (Django's backend): every header written back as it
#: came, folds included, the parts as they were, a body line starting ``From `` left as it is
#: (RFC 5322 needs no ``>From``), so the bytes sent are the bytes carried. A header added by a
#: hook is folded as ``email.policy.default`` folds it, an ASCII unstructured one at its white
#: space (:class:`FoldedHeader`).
CARRIED_POLICY = EmailPolicy(
    refold_source="none", mangle_from_=False, header_factory=MadeOnceRegistry()
)


def _encoded(name: str, value: Any, linesep: str) -> str | None:
    """``name: value`` encoded as Django encodes it (a ``List-Id``: its phrase only, RFC 2919),
    or None when the header's own folding is right (an ASCII value, :class:`FoldedHeader`) or
    better (a non-ASCII address, which needs SMTPUTF8 anyway; a structured header such as
    ``Content-Disposition``, whose parameters RFC 2231 encodes)."""
    text = str(value)
    if text.isascii():
        return None
    addresses = getattr(value, "addresses", None)
    if name.lower() in _ADDRESS_HEADERS and addresses is not None:
        if not all(address.addr_spec.isascii() for address in addresses):
            return None
        shown = ", ".join(_display(a.display_name, a.addr_spec) for a in addresses)
        return f"{name}: {shown}{linesep}"
    if not isinstance(value, UnstructuredHeader):  # Content-Disposition's filename*=: RFC 2231
        return None
    listed = _LIST_ID.match(text) if name.lower() == "list-id" else None
    if listed is not None:  # RFC 2919: only the phrase may be encoded, never the <list id>
        words = Header(listed[1], "utf-8", header_name=name).encode(linesep="")  # one line
        return fold_at_spaces(name, f"{words} {listed[2]}", linesep)
    encoded = Header(text, "utf-8", header_name=name).encode(linesep=linesep)
    return f"{name}: {encoded}{linesep}"


def _display(name: str, address: str) -> str:
    if not name or name.isascii():
        return formataddr((name, address))
    return f"{Header(name, 'utf-8').encode()} <{address}>"


def set_text(part: EmailMessage, text: str, subtype: str, charset: str) -> None:
    """Make ``part`` a ``text/<subtype>`` part holding ``text`` in ``charset``, encoded as
    Django encodes it (see the module doc). Raises ``UnicodeEncodeError`` when ``text`` has a
    character ``charset`` cannot hold, ``LookupError`` for an unknown charset."""
    codec = Charset(charset)
    if codec.input_charset == "utf-8":
        long = any(
            len(line.encode("utf-8", "surrogateescape")) > MAX_LINE_OCTETS
            for line in text.splitlines()
        )
        # None: 7bit or 8bit as the text needs (typeshed allows only an int here)
        codec.body_encoding = charsets.QP if long else None  # type: ignore[assignment]
    text.encode(codec.output_charset or "us-ascii")  # refuses what the charset cannot hold
    del part["Content-Type"]
    del part["Content-Transfer-Encoding"]
    part["Content-Type"] = f"text/{subtype}"
    part.set_payload(text, codec)


def text_part(text: str, subtype: str, charset: str) -> EmailMessage:
    """A new ``text/<subtype>`` part; see :func:`set_text`."""
    part = EmailMessage(policy=POLICY)
    set_text(part, text, subtype, charset)
    return part


def file_part(
    content: bytes,
    mimetype: str,
    filename: str,
    *,
    charset: str | None = None,
    inline: bool = False,
    content_id: str | None = None,
) -> EmailMessage:
    """One attachment: ``text/*`` as text in its charset (``utf-8`` unless given; bytes that
    do not decode go as they are, base64), ``message/rfc822`` as the message itself, anything
    else base64. ``filename`` empty: none given (a ``message/rfc822`` part without one has no
    ``Content-Disposition``, as in Django). Raises ``ValueError`` for bad content."""
    maintype, _, subtype = mimetype.partition("/")
    part = EmailMessage(policy=POLICY)
    if maintype == "text":
        try:
            set_text(part, content.decode(charset or "utf-8"), subtype, charset or "utf-8")
        except (UnicodeError, LookupError):
            part.set_content(content, maintype, subtype)
    elif mimetype == "message/rfc822":
        inner = email.message_from_bytes(content, policy=POLICY)
        part.set_content(inner)
        del part["Content-Disposition"]
    else:
        part.set_content(content, maintype, subtype)
    disposition = "inline" if inline else "attachment"
    if filename:
        part.add_header("Content-Disposition", disposition, filename=filename)
    elif inline or mimetype != "message/rfc822":
        part.add_header("Content-Disposition", disposition)
    if content_id:
        part["Content-ID"] = content_id
    return part
