"""Bounds on ``send_mail``'s arguments, checked before a mail is enqueued and again on receipt.

A worker must never choke on what a caller sent: a context nested 500 deep kills a prefork
worker's main process while it pickles the arguments for its pool, and the message then kills
the next worker. :func:`check_arguments` refuses, with one line naming the argument, anything a
worker could not carry (pure: no Celery, no I/O). The worker's guard still validates the mail
itself (address, templates, headers): this only bounds shape and size.

| argument | accepted |
|---|---|
| ``to`` | ``str``, 1-998 characters, no CR/LF/NUL |
| ``subject`` | ``None`` or ``str`` of at most 998 characters, no CR/LF/NUL |
| ``body``, ``html`` | ``None`` or ``str`` |
| ``kind`` | ``str`` of 1-64 ``a-z 0-9 _``, starting with a letter |
| ``context`` | ``None`` or a ``dict`` of JSON values: str keys, nested at most 32 deep |
| ``headers`` | ``None`` or a ``dict`` of at most 50 ``str`` to ``str`` (values <= 998 chars) |
| ``mail_id`` | ``None`` or 1-128 of ``A-Z a-z 0-9 . _ : - @ + = /`` |
| ``tenant`` | ``None`` or ``str`` of 1-64 characters, no control characters |

Every string anywhere must be valid Unicode (no lone surrogates). The whole call, as JSON, must
fit in ``max_message_bytes`` (``MAILGUARD_MAX_MESSAGE_BYTES``, 10 MB by default); a container
may hold at most :data:`MAX_ITEMS` values in all.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from mailer.defaults import MAX_MESSAGE_BYTES
from mailer.errors import MailguardError
from mailer.scoped import check_tenant

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
_PUBLIC = ("to", "subject", "body", "html", "kind", "context", "headers", "mail_id", "tenant")


class InvalidArguments(MailguardError, ValueError):
    """``send_mail`` was called with arguments a worker could not carry; nothing was enqueued."""


def check_arguments(
    args: Sequence[Any] | None,
    kwargs: Mapping[str, Any] | None,
    *,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    private: Sequence[str] = (),
) -> dict[str, Any]:
    """The call as keyword arguments, or ``InvalidArguments`` naming the first bad one.

    ``private`` names keyword arguments that only mailguard itself may pass (they are returned
    but not checked here: their owner checks them).
    """
    call = _as_keywords(args, kwargs, private)
    _text(call, "to", required=True, max_chars=_LINE_CHARS, one_line=True)
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
    _headers(call.get("headers"))
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


def _headers(headers: Any) -> None:
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
