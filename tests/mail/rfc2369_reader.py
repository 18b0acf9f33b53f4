"""A strict reader of a message's header block as a mailbox provider reads the one-click
unsubscribe: RFC 5322 (lines, folding), RFC 2369 (``List-Unsubscribe``: a comma-separated list
of angle-bracketed URIs) and RFC 8058 (an https URI, and ``List-Unsubscribe-Post:
List-Unsubscribe=One-Click``). It decodes nothing: an RFC 2047 encoded word where a URI belongs
is refused, as such a reader refuses it.

Stricter than the RFCs in two places, both what mailguard writes: no comments in the URI list
and no white space inside the brackets (RFC 2369 lets a reader ignore both). Not checked: the
DKIM signature RFC 8058 also asks for (the relay's or the provider's, not the message's).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

#: RFC 5322 2.1.1: a line holds at most 998 characters, CRLF not counted.
MAX_LINE = 998
#: RFC 8058 3.1: the one value of List-Unsubscribe-Post.
ONE_CLICK = "List-Unsubscribe=One-Click"
_FIELD_NAME = re.compile(r"^[!-9;-~]+$")
_LINE_CHARS = re.compile(r"^[\t -~]*$")
# RFC 3986 URI characters (unreserved, reserved, percent signs), a scheme first.
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+$")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# RFC 2369 2: <URI> items separated by commas, white space (unfolded FWS) around them.
_URI_LIST = re.compile(r"^[ \t]*<[^<>\s]+>[ \t]*(?:,[ \t]*<[^<>\s]+>[ \t]*)*$")


class NotReadable(AssertionError):
    """The header block is not what a strict reader accepts; the text says why."""


@dataclass(frozen=True)
class Field:
    """One header field: its name, its value unfolded (RFC 5322 2.2.3), its lines as sent."""

    name: str
    value: str
    lines: tuple[str, ...]


def header_fields(raw: bytes, linesep: bytes = b"\r\n") -> list[Field]:
    """The header block of ``raw`` (up to the first empty line), field by field. Every line
    must end with ``linesep`` (no bare CR or LF), be printable US-ASCII or tab, at most 998
    characters; a field line is ``name:``; a continuation line starts with white space."""
    block, separator, _ = raw.partition(linesep + linesep)
    if not separator:
        raise NotReadable("no empty line ends the header block")
    lines = block.split(linesep)
    if any(b"\r" in line or b"\n" in line for line in lines):
        raise NotReadable("a header line ends with a bare CR or LF")
    fields: list[list[str]] = []
    for number, data in enumerate(lines, 1):
        try:
            line = data.decode("ascii")
        except UnicodeDecodeError:
            raise NotReadable(f"header line {number} is not US-ASCII") from None
        if len(line) > MAX_LINE or not _LINE_CHARS.match(line):
            raise NotReadable(f"header line {number}: over {MAX_LINE} characters or unprintable")
        if line[:1] in (" ", "\t"):
            if not fields or not line.strip():
                raise NotReadable(f"header line {number}: a continuation with nothing to continue")
            fields[-1].append(line)
        elif not _FIELD_NAME.match(line.partition(":")[0]) or ":" not in line:
            raise NotReadable(f"header line {number} is no field (name: value)")
        else:
            fields.append([line])
    return [_field(lines) for lines in fields]


def _field(lines: list[str]) -> Field:
    name, _, first = lines[0].partition(":")
    return Field(name, "".join([first, *lines[1:]]).strip(" \t"), tuple(lines))


def the_field(fields: list[Field], name: str) -> Field:
    """The one field called ``name`` (any case); :class:`NotReadable` for none or several."""
    found = [f for f in fields if f.name.lower() == name.lower()]
    if len(found) != 1:
        raise NotReadable(f"{len(found)} {name} fields, not one")
    return found[0]


def uri_list(value: str) -> list[str]:
    """The URIs of an RFC 2369 field's unfolded ``value``: ``<URI>`` items separated by commas,
    each an absolute RFC 3986 URI; no encoded word anywhere."""
    if "=?" in value:
        raise NotReadable("an RFC 2047 encoded word where URIs belong")
    if not _URI_LIST.match(value):
        raise NotReadable("not a comma-separated list of <URI>")
    uris = re.findall(r"<([^<>]+)>", value)
    for uri in uris:
        if not _URI.match(uri) or _BAD_PERCENT.search(uri):
            raise NotReadable("an item is not an RFC 3986 URI")
    return uris


def one_click_uris(raw: bytes, linesep: bytes = b"\r\n") -> list[str]:
    """The URIs of ``raw``'s ``List-Unsubscribe``, read as RFC 8058 reads them: the field once,
    a URI list with an https URI (host given), and ``List-Unsubscribe-Post`` once, with the
    value ``List-Unsubscribe=One-Click``, no encoded word in either field's lines."""
    fields = header_fields(raw, linesep)
    return one_click_values(
        the_field(fields, "List-Unsubscribe"), the_field(fields, "List-Unsubscribe-Post")
    )


def one_click_values(unsubscribe: Field, post: Field) -> list[str]:
    """:func:`one_click_uris` for the two fields already read (an API's fields too)."""
    for field in (unsubscribe, post):
        if any("=?" in line for line in field.lines):
            raise NotReadable(f"an RFC 2047 encoded word in {field.name}")
    uris = uri_list(unsubscribe.value)
    if not any(urlsplit(u).scheme.lower() == "https" and urlsplit(u).hostname for u in uris):
        raise NotReadable("no https URI (RFC 8058 3.1)")
    if post.value != ONE_CLICK:
        raise NotReadable(f"List-Unsubscribe-Post is not {ONE_CLICK}")
    return uris
