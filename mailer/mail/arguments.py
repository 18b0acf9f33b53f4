"""Bounds on ``send_mail``'s arguments, checked before a mail is enqueued and again on receipt.

A worker must never choke on what a caller sent: a context nested 500 deep kills a prefork
worker's main process while it pickles the arguments for its pool, and the message then kills
the next worker. :func:`check_arguments` refuses, with one line naming the argument, anything a
worker could not carry, and every address the worker would refuse (pure: no Celery, no I/O).
The kind and its templates' variables are checked against the settings by
:func:`workers.run.call.check_call`; the worker's guard still validates the whole mail.

| argument | accepted |
|---|---|
| ``to`` | an address (``str``, valid, no CR/LF/NUL; ``"Name <address>"`` too); or a list |
| ``cc``, ``bcc``, ``reply_to`` | ``None``, an address or a list of addresses (each checked) |
| ``from_email`` | ``None`` or ``str`` (``"Name <address>"`` or an address, valid), one line |
| ``attachments`` | ``None`` or a list of ``[filename, base64 content, mimetype]``, each with |
| | an optional fourth: ``{"charset": str, "inline": bool, "content_id": "<id@host>"}`` |
| ``charset`` | ``None`` or the body's charset, one Python knows (``iso-8859-1``) |
| ``subject`` | ``None`` or ``str`` of at most 998 characters, no CR/LF/NUL |
| ``body``, ``html`` | ``None`` or ``str`` |
| ``kind`` | ``str`` of 1-64 ``a-z 0-9 _``, starting with a letter |
| ``context`` | ``None`` or a ``dict`` of JSON values: str keys, nested at most 32 deep |
| ``headers`` | ``None`` or a ``dict`` of at most 50 field names (not reserved: ``To``, ``From``, |
| | ``Cc``... are arguments) to one-line values of at most 998 characters; no ``Reply-To`` |
| | beside ``reply_to`` |
| ``mail_id`` | ``None`` or 1-128 of ``A-Z a-z 0-9 . _ : - @ + = /`` |
| ``tenant`` | ``None`` or ``str`` of 1-64 characters, no control characters |
| ``mime`` | ``None`` or base64 text of a whole message (a header block with ``From``, no |
| | ``Bcc``), sent as it is to to, cc and bcc; then no subject, body, html, headers, |
| | reply_to, attachments, charset or context |

A message has at most :data:`MAX_RECIPIENTS` envelope recipients (to, cc and bcc) and
:data:`MAX_ATTACHMENTS` attachments. Every string anywhere must be valid Unicode (no lone
surrogates). The whole call, as JSON, must fit in ``max_message_bytes``
(``MAILGUARD_MAX_MESSAGE_BYTES``, 10 MB by default); a container may hold at most
:data:`MAX_ITEMS` values in all.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from mailer.defaults import MAX_MESSAGE_BYTES
from mailer.errors import InvalidAddress, InvalidMessage, MailguardError
from mailer.limits.checks import check_tenant
from mailer.mail.address import DEFAULT_RULES, AddressRules, mailbox
from mailer.mail.carried import carried_bytes
from mailer.mail.envelope import attachments, charset
from mailer.mail.message import check_extra_header

#: Deepest nesting of lists and dicts in ``context``.
MAX_DEPTH = 32
#: Most values (list items, dict entries) in one call, counted over every container.
MAX_ITEMS = 10_000
#: Largest integer a context may hold (JSON readers beyond Python lose precision past 2**53).
MAX_INT = 2**63 - 1

_LINE_CHARS = 998
_MAX_HEADERS = 50
_KIND = re.compile(r"[a-z][a-z0-9_]{0,63}")
_MAIL_ID = re.compile(r"[A-Za-z0-9._:@+=/-]{1,128}")
_PUBLIC = (
    "to",
    "subject",
    "body",
    "html",
    "kind",
    "context",
    "headers",
    "mail_id",
    "tenant",
    "cc",
    "bcc",
    "reply_to",
    "from_email",
    "attachments",
    "charset",
    "mime",
)
#: What a carried message (``mime``) already holds: none of these may come beside it.
_NOT_WITH_MIME = (
    "subject",
    "body",
    "html",
    "headers",
    "reply_to",
    "attachments",
    "charset",
    "context",
)
#: Most envelope recipients of one message (to, cc and bcc together).
MAX_RECIPIENTS = 100
#: Most attachments of one message.
MAX_ATTACHMENTS = 100
_CID = re.compile(r"<[!-;=?-~]+@[!-;=?-~]+>")
_MIME = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}")


class InvalidArguments(MailguardError, ValueError):
    """``send_mail`` was called with arguments a worker could not carry; nothing was enqueued."""


def check_arguments(
    args: Sequence[Any] | None,
    kwargs: Mapping[str, Any] | None,
    *,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    private: Sequence[str] = (),
    addresses: bool = True,
    rules: AddressRules = DEFAULT_RULES,
) -> dict[str, Any]:
    """The call as keyword arguments, or ``InvalidArguments`` naming the first bad one.

    ``private`` names keyword arguments that only mailguard itself may pass (they are returned
    but not checked here: their owner checks them). ``addresses`` False bounds the addresses
    (text, one line, how many) without parsing them: for a check that the guard's own
    validation follows (the worker's receipt check), so an address is parsed twice per mail,
    at ``delay()`` and in the guard. ``rules``: how addresses are checked (the settings'
    ``address_rules``: the reserved domains admitted).
    """
    call = _as_keywords(args, kwargs, private)
    parse = rules if addresses else None
    _to(call, parse)
    envelope = sum(
        len(value) if isinstance(value, list) else 1
        for value in (call.get("to"), call.get("cc"), call.get("bcc"))
        if value is not None
    )
    for name in ("cc", "bcc", "reply_to"):
        _addresses(call, name, parse=parse)
    if envelope > MAX_RECIPIENTS:
        raise InvalidArguments(
            f"send_mail: {envelope} recipients in to, cc and bcc; at most {MAX_RECIPIENTS}"
        )
    _from_email(call, parse)
    _mime(call)
    _attachments(call.get("attachments"))
    _charset(call.get("charset"))
    _text(call, "subject", max_chars=_LINE_CHARS, one_line=True)
    _text(call, "body")
    _text(call, "html")
    kind = call.get("kind", "default")
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise InvalidArguments(f"send_mail: kind must be 1-64 of a-z, 0-9, _; got {_show(kind)}")
    mail_id = call.get("mail_id")
    if mail_id is not None and (not isinstance(mail_id, str) or not _MAIL_ID.fullmatch(mail_id)):
        raise InvalidArguments(
            f"send_mail: mail_id must be 1-128 of A-Z a-z 0-9 . _ : - @ + = /; got {_show(mail_id)}"
        )
    tenant = call.get("tenant")
    if tenant is not None:
        try:
            check_tenant(tenant)
        except ValueError as exc:
            raise InvalidArguments(f"send_mail: {exc}; got {_show(tenant)}") from None
    _headers(call.get("headers"), reply_to=call.get("reply_to") is not None)
    context = call.get("context")
    if context is not None and not isinstance(context, dict):
        raise InvalidArguments(f"send_mail: context must be a dict, got {_show(context)}")
    walker = _Walker()
    for name, value in call.items():
        if name not in private:
            walker.walk(value, f"send_mail: {name}", 0)
    public = {name: value for name, value in call.items() if name not in private}
    size = len(json.dumps(public, ensure_ascii=False).encode("utf-8"))
    if size > max_message_bytes:
        raise InvalidArguments(
            f"send_mail: the call is {size} bytes as JSON, more than MAILGUARD_MAX_MESSAGE_BYTES "
            f"({max_message_bytes})"
        )
    return call


def _as_keywords(
    args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None, private: Sequence[str]
) -> dict[str, Any]:
    args = list(args or ())
    if not isinstance(kwargs, Mapping | None) or len(args) > 3:
        raise InvalidArguments("send_mail takes at most 3 positional arguments: to, subject, body")
    call = dict(zip(_PUBLIC, args, strict=False))
    for name, value in (kwargs or {}).items():
        if name not in _PUBLIC and name not in private:
            raise InvalidArguments(f"send_mail: unexpected argument {_show(name)}")
        if name in call:
            raise InvalidArguments(f"send_mail: {name} given twice")
        call[name] = value
    return call


def _text(
    call: Mapping[str, Any],
    name: str,
    *,
    required: bool = False,
    max_chars: int | None = None,
    one_line: bool = False,
) -> None:
    value = call.get(name)
    if value is None and not required:
        return
    if not isinstance(value, str) or (required and not value):
        raise InvalidArguments(f"send_mail: {name} must be text, got {_show(value)}")
    if max_chars is not None and len(value) > max_chars:
        raise InvalidArguments(
            f"send_mail: {name} has {len(value)} characters, at most {max_chars}"
        )
    if one_line and any(c in value for c in "\r\n\0"):
        raise InvalidArguments(f"send_mail: {name} must be one line (no CR, LF or NUL)")


def _to(call: Mapping[str, Any], parse: AddressRules | None) -> None:
    """``to``: an address, or a list of them; empty only with cc or bcc (a Bcc newsletter,
    its To header then ``undisclosed-recipients:;``)."""
    to = call.get("to")
    if to == [] and (call.get("cc") or call.get("bcc")):
        return
    if isinstance(to, list):
        _addresses(call, "to", parse=parse, required=True)
    else:
        _text(call, "to", required=True, max_chars=_LINE_CHARS, one_line=True)
        if parse:
            _address(str(to), "to", "to", parse)  # _text made sure it is a str


def _addresses(
    call: Mapping[str, Any], name: str, *, parse: AddressRules | None, required: bool = False
) -> None:
    """An address or a list of them, each a valid address under the rules ``parse`` (checked
    here: the earliest point that can know; ``parse`` None: bounded, not parsed)."""
    value = call.get(name)
    if value is None and not required:
        return
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or len(items) > MAX_RECIPIENTS:
        raise InvalidArguments(
            f"send_mail: {name} must be an address or a list of 1 to {MAX_RECIPIENTS} addresses"
        )
    for n, item in enumerate(items):
        if not isinstance(item, str) or not item or len(item) > _LINE_CHARS:
            raise InvalidArguments(f"send_mail: {name}[{n}] must be text, got {_show(item)}")
        if any(c in item for c in "\r\n\0"):
            raise InvalidArguments(f"send_mail: {name}[{n}] must be one line (no CR, LF or NUL)")
        if parse:
            _address(item, name if isinstance(value, str) else f"{name}[{n}]", name, parse)


def _address(item: str, where: str, name: str, rules: AddressRules) -> None:
    """One address of argument ``name`` (shown as ``where``), valid as the worker will check it
    (a display name allowed: ``"Ada <ada@example.com>"``); the refusal names the argument and
    the accepted form, never the address."""
    try:
        mailbox(item, rules)
    except InvalidAddress as exc:
        form = '"Name <address>" or ' if name == "reply_to" else ""
        raise InvalidArguments(
            f"send_mail: {where}: {exc}; give {form}an address such as ada@example.com, or a "
            "list of them"
        ) from None


def _attachments(value: Any) -> None:
    """``[filename, base64 content, mimetype]`` items, each decodable."""
    if value is None:
        return
    if not isinstance(value, list) or len(value) > MAX_ATTACHMENTS:
        raise InvalidArguments(
            f"send_mail: attachments must be a list of at most {MAX_ATTACHMENTS} "
            "[filename, base64 content, mimetype] items"
        )
    for n, item in enumerate(value):
        if not isinstance(item, list | tuple) or len(item) not in (3, 4):
            raise InvalidArguments(
                f"send_mail: attachments[{n}] must be [filename, base64 content, mimetype]"
            )
        filename, content, mimetype = item[:3]
        if (
            not isinstance(filename, str)
            or len(filename) > 255
            or any(c in filename for c in "\r\n\0")
        ):
            raise InvalidArguments(
                f"send_mail: attachments[{n}] filename must be one line of 0-255 characters"
            )
        if len(item) == 4:
            _attachment_options(item[3], n)
        if not isinstance(content, str):
            raise InvalidArguments(f"send_mail: attachments[{n}] content must be base64 text")
        try:
            base64.b64decode(content, validate=True)
        except (ValueError, binascii.Error):
            raise InvalidArguments(
                f"send_mail: attachments[{n}] content is not valid base64"
            ) from None
        if not isinstance(mimetype, str) or not _MIME.fullmatch(mimetype):
            raise InvalidArguments(
                f"send_mail: attachments[{n}] mimetype must be type/subtype such as text/csv"
            )


def _attachment_options(options: Any, n: int) -> None:
    """An attachment's options, as the worker reads them (:func:`mailer.mail.envelope`)."""
    try:
        attachments([["", "", "application/octet-stream", options]])
    except InvalidMessage:
        raise InvalidArguments(
            f"send_mail: attachments[{n}] options must be a dict of charset (str), inline "
            "(bool) and content_id (str)"
        ) from None
    content_id = options.get("content_id")
    if content_id is not None and (len(content_id) > _LINE_CHARS or not _CID.fullmatch(content_id)):
        raise InvalidArguments(f"send_mail: attachments[{n}] content_id must be <left@right>")
    if options.get("charset") is not None:
        _charset(options["charset"], f"attachments[{n}] charset")


def _charset(value: Any, name: str = "charset") -> None:
    if value is None:
        return
    try:
        charset(value)
    except InvalidMessage:
        raise InvalidArguments(
            f"send_mail: {name} must be a charset Python knows, such as utf-8; got {_show(value)}"
        ) from None


def _headers(headers: Any, *, reply_to: bool) -> None:
    """Extra headers: field names that are not reserved (``To``, ``From``, ``Cc``...: use the
    arguments), one-line values; ``Reply-To`` not beside the ``reply_to`` argument."""
    if headers is None:
        return
    if not isinstance(headers, dict) or len(headers) > _MAX_HEADERS:
        raise InvalidArguments(
            f"send_mail: headers must be a dict of at most {_MAX_HEADERS} str to str"
        )
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str) or len(value) > _LINE_CHARS:
            raise InvalidArguments(
                f"send_mail: headers must map str to str of at most {_LINE_CHARS} characters"
            )
        try:
            check_extra_header(name, value, _LINE_CHARS)
        except InvalidMessage as exc:
            raise InvalidArguments(f"send_mail: {exc}") from None
        if reply_to and name.lower() == "reply-to":
            raise InvalidArguments(
                "send_mail: Reply-To given twice (the reply_to argument and a header); use one"
            )


def _mime(call: Mapping[str, Any]) -> None:
    """``mime``: a whole message, alone (what it holds is not given twice)."""
    if call.get("mime") is None:
        return
    beside = [name for name in _NOT_WITH_MIME if call.get(name) is not None]
    if beside:
        raise InvalidArguments(
            f"send_mail: mime carries a whole message; {', '.join(beside)} cannot come beside it"
        )
    try:
        carried_bytes(call["mime"])
    except InvalidMessage as exc:
        raise InvalidArguments(f"send_mail: {exc}") from None


def _from_email(call: Mapping[str, Any], parse: AddressRules | None) -> None:
    """``from_email``: one line, ``"Name <address>"`` or an address, the address valid."""
    _text(call, "from_email", max_chars=_LINE_CHARS, one_line=True)
    value = call.get("from_email")
    if value is None or not parse:
        return
    try:
        mailbox(value, parse)
    except InvalidAddress as exc:
        raise InvalidArguments(f"send_mail: from_email: {exc}") from None


class _Walker:
    """Checks depth, item count, key types, numbers and Unicode of every value, iteratively
    deep only up to :data:`MAX_DEPTH` (no recursion past it)."""

    def __init__(self) -> None:
        self.items = 0

    def walk(self, value: Any, where: str, depth: int) -> None:
        if isinstance(value, str):
            _unicode(value, where)
        elif value is None or isinstance(value, bool):
            return
        elif isinstance(value, int):
            if abs(value) > MAX_INT:
                raise InvalidArguments(f"{where}: integer out of range (|n| <= 2**63 - 1)")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise InvalidArguments(f"{where}: {value} is not a finite number")
        elif isinstance(value, dict | list | tuple):
            self._container(value, where, depth)
        else:
            raise InvalidArguments(
                f"{where}: a {type(value).__name__} cannot travel as JSON; use str, int, float, "
                "bool, None, lists and dicts with str keys"
            )

    def _container(
        self, value: dict[Any, Any] | list[Any] | tuple[Any, ...], where: str, depth: int
    ) -> None:
        if depth > MAX_DEPTH:
            raise InvalidArguments(f"{where}: nested deeper than {MAX_DEPTH} levels")
        self.items += len(value)
        if self.items > MAX_ITEMS:
            raise InvalidArguments(f"send_mail: more than {MAX_ITEMS} values in all")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InvalidArguments(f"{where}: keys must be str, got {_show(key)}")
                _unicode(key, where)
                self.walk(item, where, depth + 1)
        else:
            for item in value:
                self.walk(item, where, depth + 1)


def _unicode(value: str, where: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArguments(f"{where}: not valid Unicode (a lone surrogate)") from None


def _show(value: Any) -> str:
    """A short, safe description of a bad value: its type, and a str's first characters."""
    if isinstance(value, str):
        return repr(value[:40].encode("utf-8", "backslashreplace").decode("ascii", "replace"))
    return type(value).__name__
