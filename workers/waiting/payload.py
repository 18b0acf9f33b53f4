"""A parked mail's payload: the task message a promoter publishes again, in as few bytes as can be.

Version 4 (:data:`WRITE_VERSION`, the one written and read), a compact JSON array::

    [4, <due, epoch ms>, <args>, <kwargs>, <progress>, <task id>?]

- the **mail id** is not in it: it is the entry's own name in the schedule (the hash field), and
  is put back into ``kwargs`` when decoded;
- the **progress** is the :class:`~mailer.steps.Progress` itself, as a list of values in the
  order of :data:`ORDER_4`, those at the end that hold their usual value (:data:`USUAL_4`: no
  count, the slot itself, no stale owner) left out (about 20 B for a booked mail), not sealed:
  the seal (about 240 B of base64 JSON and tag) is made again when the mail is published
  (:meth:`Parked.message_kwargs`). Its times are not written out again: each is an integer of
  milliseconds from the payload's due (``0`` for the slot itself, which ``due`` and
  ``first_due`` usually are; ``first_seen`` from ``requested_at`` when there is one: a queue's
  wait), ``null`` for none (0), or, for a ``due`` / ``first_due`` that is not a whole
  millisecond, epoch seconds as they are (a float: they are compared for equality);
  ``requested_at`` and ``first_seen`` (measures, not slots) are kept to the millisecond. The
  seal keeps a *caller* from forging progress in a broker message; the schedule is written by
  workers only, in the ledger's Redis, whose writers could already change any mail's ledger
  claim or payload, so a seal there protected nothing;
- ``_requested_at`` is left out of ``kwargs`` when the progress carries the request time (the
  run reads the progress's first);
- the task id only when it is not the mail id (a caller's own ``mail_id``);
- ``args`` of one address (``send_mail(to, ...)``: the usual call) as that string.

A payload is stored *packed* when that is shorter (almost always): ``d`` and its JSON as a raw
deflate stream against :data:`DICTIONARY`, the words a payload is made of (``send_mail``'s
keywords, a booked mail's progress): a short mail's 92 B of JSON are 58 B packed, which Redis
keeps in a 64-byte allocation where the JSON took 96. The first byte tells a packed payload
(``d``) from its JSON (``[``).

Nothing else is read: any other bytes are refused (``ValueError``), and the promoter buries
such an entry as any payload it cannot use.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, replace
from typing import Any

from mailer.mail import seal
from mailer.steps import Progress

#: The version written and read (the array's first value).
WRITE_VERSION = 4
#: The first byte of a packed payload: its JSON deflated against :data:`DICTIONARY` follows.
PACKED = b"d"
#: What a payload's JSON is deflated against (zlib's preset dictionary): the keywords of
#: ``send_mail`` and the usual start of an array and of a booked mail's progress, the commonest
#: last (the nearest). Never changed: every packed payload is read with it (another dictionary
#: would take another first byte).
DICTIONARY = (
    b'"attachments":[["charset":"utf-8","mime":"from_email":"reply_to":"bcc":"cc":"tenant":'
    b'"headers":{"html":"<p>","kind":"notice","kind":"code","context":{"code":".com",.org",'
    b'@gmail.com",{"subject":"","body":"},[1,null,-[4,1'
)
#: The order of a payload's progress values: those most often at their usual value
#: last, so that they are left out.
ORDER_4 = (
    "deferrals",
    "requested_at",
    "first_seen",
    "turn",
    "parent",
    "attempts",
    "send_failures",
    "limiter_failures",
    "stale_owner",
    "due",
    "first_due",
    "greylists",
)
#: A progress value as written when it is left out at the end (times relative to the
#: payload's due: 0 is the slot itself).
USUAL_4: dict[str, Any] = {
    "deferrals": 0,
    "requested_at": None,
    "first_seen": None,
    "turn": 0,
    "parent": "",
    "attempts": 0,
    "send_failures": 0,
    "limiter_failures": 0,
    "stale_owner": "",
    "due": 0,
    "first_due": 0,
    "greylists": 0,
}
_SEPARATORS = (",", ":")
#: The progress's times (written relative to the due) and those that are slots, kept exact.
_TIMES = ("requested_at", "due", "first_due", "first_seen")
_SLOTS = ("due", "first_due")


@dataclass(frozen=True)
class Parked:
    """A payload, decoded: what a promoter publishes again.

    ``kwargs`` always hold the mail id. ``progress`` is the unsealed progress (``kwargs`` then
    have no ``_progress``); None for a message kept as it was enqueued (its ``kwargs`` as they
    were, a sealed ``_progress`` among them if it had one).
    """

    task_id: str
    args: list[Any]
    kwargs: dict[str, Any]
    due: float
    progress: Progress | None = None

    @property
    def mail_id(self) -> str:
        return str(self.kwargs["mail_id"])

    def encode(self) -> bytes:
        """What the schedule stores: :meth:`array` packed (:func:`pack`) when that is shorter."""
        raw = self.array()
        packed = pack(raw)
        return packed if len(packed) < len(raw) else raw

    def array(self) -> bytes:
        """The JSON array (see the module's docstring); the sealed ``_progress`` of ``kwargs``
        is dropped when :attr:`progress` is given (it is sealed again when published)."""
        rest = {k: v for k, v in self.kwargs.items() if k != "mail_id"}
        due_ms = round(self.due * 1000)
        progress: list[Any] | None = None
        if self.progress is not None:
            rest.pop("_progress", None)
            values: dict[str, Any] = dict(self.progress.as_dict())
            seen_from = _base(self.progress.requested_at, due_ms)
            for name in _TIMES:
                base = seen_from if name == "first_seen" else due_ms
                values[name] = _relative(float(values[name]), base, exact=name in _SLOTS)
            progress = _shortened([values[name] for name in ORDER_4])
            if self.progress.requested_at:
                rest.pop("_requested_at", None)
        args: Any = self.args
        if len(args) == 1 and isinstance(args[0], str):
            args = args[0]  # one address, the usual call: read back as a list of it
        data: list[Any] = [WRITE_VERSION, due_ms, args, rest, progress]
        if self.task_id != self.mail_id:
            data.append(self.task_id)
        return json.dumps(data, separators=_SEPARATORS).encode()

    def message_kwargs(self, mail_id: str, secret: str | bytes | None) -> dict[str, Any]:
        """The keywords to publish: ``kwargs`` with the progress sealed for ``mail_id``. A
        progress of turn 0 (a caller's far ``eta`` parked at enqueue) goes as turn 1: a
        published payload is never a first message, which the ledger ends as a stale copy
        while its mail has an entry in the schedule (``begin.lua``)."""
        if self.progress is None:
            return self.kwargs
        progress = self.progress
        if progress.turn == 0:
            progress = replace(progress, turn=1)
        return self.kwargs | {"_progress": seal(progress, mail_id, secret)}

    @classmethod
    def decode(cls, payload: bytes | None, mail_id: str | None = None) -> Parked:
        """The message of a payload parked as ``mail_id`` (the payload leaves it out);
        ``ValueError`` saying why for anything else."""
        if not payload:
            raise ValueError("no payload")
        raw = bytes(payload)
        if raw[:1] == PACKED:
            raw = unpack(raw)
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if isinstance(data, list) and data[:1] == [WRITE_VERSION]:
            return cls._array(data, mail_id)
        raise ValueError(f"not a version {WRITE_VERSION} payload")

    @classmethod
    def _array(cls, data: list[Any], mail_id: str | None) -> Parked:
        """A payload's array (``data``)."""
        if mail_id is None:
            raise ValueError("a payload needs its mail id")
        if len(data) not in (5, 6):
            raise ValueError("not 5 or 6 fields")
        _, due, args, rest, values = data[:5]
        if isinstance(args, str):
            args = [args]
        if not isinstance(rest, dict) or "mail_id" in rest:
            raise ValueError("kwargs missing")
        if isinstance(due, bool) or not isinstance(due, int):
            raise ValueError("due missing")
        due_ms, due = due, due / 1000
        progress = None if values is None else _progress(values, due_ms)
        task = data[5] if len(data) == 6 else mail_id
        return cls._checked(task, args, rest | {"mail_id": mail_id}, due, progress)

    @classmethod
    def _checked(
        cls, task: Any, args: Any, kwargs: dict[str, Any], due: Any, progress: Progress | None
    ) -> Parked:
        if not isinstance(task, str) or not isinstance(args, list):
            raise ValueError("task id or args missing")
        if isinstance(due, bool) or not isinstance(due, (int, float)):
            raise ValueError("due missing")
        return cls(task, args, kwargs, float(due), progress)


def pack(raw: bytes) -> bytes:
    """``raw`` (a payload's JSON) packed: :data:`PACKED`, then a raw deflate stream (no header
    nor checksum) against :data:`DICTIONARY`, its window no larger than the two need (a small
    one is cheap to set up: about 10 µs for a short mail)."""
    window = max(9, min(15, (len(raw) + len(DICTIONARY)).bit_length()))
    packer = zlib.compressobj(9, zlib.DEFLATED, -window, 2, zlib.Z_DEFAULT_STRATEGY, DICTIONARY)
    return PACKED + packer.compress(raw) + packer.flush()


def unpack(packed: bytes) -> bytes:
    """The JSON of a :func:`pack`-ed payload; ``ValueError`` if it is not one, whole."""
    unpacker = zlib.decompressobj(-15, DICTIONARY)
    try:
        raw = unpacker.decompress(packed[len(PACKED) :]) + unpacker.flush()
    except zlib.error as exc:
        raise ValueError(f"not a packed payload: {exc}") from None
    if not unpacker.eof or unpacker.unused_data:
        raise ValueError("not a packed payload: cut short or followed by more")
    return raw


def _shortened(values: list[Any]) -> list[Any]:
    """A written progress: ``values`` (in the order of :data:`ORDER_4`) less those at the
    end that hold their usual value (:data:`USUAL_4`)."""
    usual = [USUAL_4[name] for name in ORDER_4]
    end = len(values)
    while end and _same(values[end - 1], usual[end - 1]):
        end -= 1
    return values[:end]


def _same(value: Any, usual: Any) -> bool:
    """``value`` is ``usual`` as JSON writes it (0 is not 0.0 nor False, "" is not None)."""
    return type(value) is type(usual) and value == usual


def _progress(values: Any, due_ms: int) -> Progress:
    """The progress of a payload from its written ``values`` (``due_ms``: the payload's due,
    epoch ms)."""
    if not isinstance(values, list) or len(values) > len(ORDER_4):
        raise ValueError("progress malformed")
    named = USUAL_4 | dict(zip(ORDER_4, values, strict=False))
    for name in _TIMES:
        if name != "first_seen":
            named[name] = _absolute(named[name], due_ms)
    named["first_seen"] = _absolute(named["first_seen"], _base(named.get("requested_at"), due_ms))
    return Progress.from_dict(named)


def _base(requested_at: Any, due_ms: int) -> int:
    """What a written ``first_seen`` counts from, in epoch ms: the request time (a first run
    sees the mail a queue's wait after it, a short count where the due is a booking's wait
    away), or the due without one."""
    if isinstance(requested_at, bool) or not isinstance(requested_at, int | float):
        return due_ms
    at = float(requested_at)
    return round(at * 1000) if at and math.isfinite(at) else due_ms


def _relative(value: float, due_ms: int, *, exact: bool) -> int | float | None:
    """A progress time as written: None for none (0); else milliseconds from the
    due (``due_ms``, epoch ms), rounded unless ``exact`` (a slot not on a whole millisecond is
    then kept as it is, epoch seconds)."""
    if not value:
        return None
    if not math.isfinite(value):
        return value
    ms = round(value * 1000)
    if exact and ms / 1000 != value:
        return value
    return ms - due_ms


def _absolute(value: Any, due_ms: int) -> Any:
    """The inverse of :func:`_relative` (anything else is left to ``Progress.from_dict``)."""
    if value is None:
        return 0.0
    if isinstance(value, int) and not isinstance(value, bool):
        return (due_ms + value) / 1000
    return value
