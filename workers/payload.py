"""A parked mail's payload: the task message a promoter publishes again, in as few bytes as can be.

Version 3 (read by this release, written from the next: :data:`WRITE_VERSION`), a compact JSON
array::

    [3, <due, epoch ms>, <args>, <kwargs>, <progress>, <task id>?]

- the **mail id** is not in it: it is the entry's own name in the schedule (the hash field), and
  is put back into ``kwargs`` when decoded;
- the **progress** is the :class:`~mailer.steps.Progress` itself, as a list of values in the
  order of :data:`PROGRESS_FIELDS` (about 40 B), not sealed: the seal (about 240 B of base64 JSON
  and tag) is made again when the mail is published (:meth:`Parked.message_kwargs`). Its times
  are not written out again: each is an integer of milliseconds from the payload's due (``0``
  for the slot itself, which ``due`` and ``first_due`` usually are), ``null`` for none (0), or,
  for a ``due`` / ``first_due`` that is not a whole millisecond, epoch seconds as they are (a
  float: they are compared for equality); ``requested_at`` and ``first_seen`` (measures, not
  slots) are kept to the millisecond. The seal
  keeps a *caller* from forging progress in a broker message; the schedule is written by
  workers only, in the ledger's Redis, whose writers could already change any mail's ledger
  claim or payload, so a seal there protected nothing;
- ``_requested_at`` is left out of ``kwargs`` when the progress carries the request time (the
  run reads the progress's first);
- the task id only when it is not the mail id (a caller's own ``mail_id``).

A payload longer than :data:`COMPRESS_OVER` bytes (long bodies, large template contexts) is
stored zlib-compressed when that is shorter; a zlib stream starts with byte ``0x78``.

Versions 1 and 2 (entries parked by earlier workers) are still read. Version 2 is the same
array with ``2`` first, the due in epoch seconds and the progress's times as epoch seconds.
Version 1 is a JSON object ``{"v": 1, "args", "kwargs", "due"[, "task"]}`` whose ``kwargs`` hold
the mail id and the sealed ``_progress``. The first byte tells an object (``{``) from an array
(``[``, or ``x``: compressed), the array's first value its version.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from typing import Any

from mailer.mail.seal import seal
from mailer.steps import Progress

#: The newest version read.
PAYLOAD_VERSION = 3
#: The version written: 2 while workers that read only versions 1 and 2 may still run (one of
#: them would bury a version 3 entry as a dead letter); 3 from the release after this one.
WRITE_VERSION = 2
#: Payloads longer than this many bytes are stored compressed when that saves room.
COMPRESS_OVER = 200
#: The order of a version 2 payload's progress values; a field added later goes at the end
#: (an older payload then lacks it and it starts at its default).
PROGRESS_FIELDS = (
    "attempts",
    "send_failures",
    "limiter_failures",
    "deferrals",
    "stale_owner",
    "requested_at",
    "due",
    "first_due",
    "first_seen",
    "turn",
    "parent",
)
_SEPARATORS = (",", ":")
#: The progress's times (relative to the due in version 3) and those that are slots, kept exact.
_TIMES = ("requested_at", "due", "first_due", "first_seen")
_SLOTS = ("due", "first_due")


@dataclass(frozen=True)
class Parked:
    """A payload, decoded: what a promoter publishes again.

    ``kwargs`` always hold the mail id. ``progress`` is the unsealed progress of a version 2
    payload (``kwargs`` then have no ``_progress``); None for version 1, whose ``kwargs`` carry
    the sealed ``_progress`` as it was.
    """

    task_id: str
    args: list[Any]
    kwargs: dict[str, Any]
    due: float
    progress: Progress | None = None

    @property
    def mail_id(self) -> str:
        return str(self.kwargs["mail_id"])

    def encode(self, version: int = WRITE_VERSION) -> bytes:
        """Version 2 or 3 bytes (see the module's docstring); the sealed ``_progress`` of
        ``kwargs`` is dropped when :attr:`progress` is given (it is sealed again when
        published)."""
        rest = {k: v for k, v in self.kwargs.items() if k != "mail_id"}
        due_ms = round(self.due * 1000)
        progress: list[Any] | None = None
        if self.progress is not None:
            rest.pop("_progress", None)
            values: dict[str, Any] = dict(self.progress.as_dict())
            if version == 3:
                for name in _TIMES:
                    values[name] = _relative(float(values[name]), due_ms, exact=name in _SLOTS)
            progress = [values[name] for name in PROGRESS_FIELDS]
            if self.progress.requested_at:
                rest.pop("_requested_at", None)
        head = [3, due_ms] if version == 3 else [2, round(self.due, 3)]
        data: list[Any] = [*head, self.args, rest, progress]
        if self.task_id != self.mail_id:
            data.append(self.task_id)
        raw = json.dumps(data, separators=_SEPARATORS).encode()
        if len(raw) > COMPRESS_OVER:
            packed = zlib.compress(raw, 6)
            if len(packed) < len(raw):
                return packed
        return raw

    def message_kwargs(self, mail_id: str, secret: str | bytes | None) -> dict[str, Any]:
        """The keywords to publish: ``kwargs`` with the progress sealed for ``mail_id``."""
        if self.progress is None:
            return self.kwargs
        return self.kwargs | {"_progress": seal(self.progress, mail_id, secret)}

    @classmethod
    def decode(cls, payload: bytes | None, mail_id: str | None = None) -> Parked:
        """The message of a version 1 or 2 payload parked as ``mail_id`` (needed for version
        2, which leaves it out); ``ValueError`` saying why for anything else."""
        if not payload:
            raise ValueError("no payload")
        raw = bytes(payload)
        if raw[:1] == b"x":
            try:
                raw = zlib.decompress(raw)
            except zlib.error as exc:
                raise ValueError(f"not zlib: {exc}") from None
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if isinstance(data, dict) and data.get("v") == 1:
            return cls._version1(data)
        if isinstance(data, list) and data[:1] in ([2], [3]):
            return cls._array(data, mail_id)
        raise ValueError("not a version 1, 2 or 3 payload")

    @classmethod
    def _version1(cls, data: dict[str, Any]) -> Parked:
        args, kwargs, due = (data.get(k) for k in ("args", "kwargs", "due"))
        if not isinstance(kwargs, dict) or not isinstance(kwargs.get("mail_id"), str):
            raise ValueError("kwargs or mail id missing")
        task = data.get("task", kwargs["mail_id"])
        return cls._checked(task, args, kwargs, due, None)

    @classmethod
    def _array(cls, data: list[Any], mail_id: str | None) -> Parked:
        """A version 2 or 3 payload (``data[0]``)."""
        if mail_id is None:
            raise ValueError("a version 2 or 3 payload needs its mail id")
        if len(data) not in (5, 6):
            raise ValueError("not 5 or 6 fields")
        version, due, args, rest, values = data[:5]
        if not isinstance(rest, dict) or "mail_id" in rest:
            raise ValueError("kwargs missing")
        if version == 3:
            if isinstance(due, bool) or not isinstance(due, int):
                raise ValueError("due missing")
            due_ms, due = due, due / 1000
        progress = None
        if values is not None:
            if not isinstance(values, list) or len(values) > len(PROGRESS_FIELDS):
                raise ValueError("progress malformed")
            named = dict(zip(PROGRESS_FIELDS, values, strict=False))
            if version == 3:
                for name in _TIMES:
                    if name in named:
                        named[name] = _absolute(named[name], due_ms)
            progress = Progress.from_dict(named)
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


def _relative(value: float, due_ms: int, *, exact: bool) -> int | float | None:
    """A progress time as version 3 writes it: None for none (0); else milliseconds from the
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
