"""The warm-up record in a dict: for tests, the demo, and a threads or solo pool (one process).
Mirrors ``lua/take.lua`` (the contract tests run both)."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from mailer.records.warmup.base import Taken


@dataclass
class _Sender:
    start: float
    last: float
    day: int = 0
    used: int = 0
    waiting: int = 0
    #: Per day (today and yesterday only): hashed mail id -> "a" (counted) or its position.
    mails: dict[int, dict[str, str]] = field(default_factory=dict)


class MemoryWarmupStore:
    """:class:`~mailer.records.warmup.base.WarmupStore` in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._senders: dict[str, _Sender] = {}

    def take(
        self,
        sid: str,
        mail: str,
        *,
        now: float,
        allowances: tuple[int, ...],
        day_length: float,
        idle: float,
        force: bool,
    ) -> Taken:
        with self._lock:
            entry = self._senders.get(sid)
            if entry is None or now - entry.last >= idle:
                entry = self._senders[sid] = _Sender(now, now)
            today = max(math.floor((now - entry.start) / day_length) + 1, entry.day)
            if today != entry.day:
                entry.day, entry.used, entry.waiting = today, 0, 0
                entry.mails = {d: m for d, m in entry.mails.items() if d >= today - 1}
            entry.last = max(entry.last, now)
            allowance = allowances[today - 1] if today <= len(allowances) else None
            marks = entry.mails.setdefault(today, {})
            seen = marks.get(mail)
            admitted = seen == "a" or entry.mails.get(today - 1, {}).get(mail) == "a"
            position = 0
            if not admitted and (force or allowance is None or entry.used < allowance):
                entry.used += 1
                marks[mail] = "a"
                admitted = True
            elif not admitted:
                if seen is None:
                    entry.waiting += 1
                    seen = marks[mail] = str(entry.waiting)
                position = int(seen)
            return Taken(
                admitted,
                today,
                allowance,
                entry.used,
                entry.waiting,
                entry.start,
                day_length,
                position,
            )

    def state(self, sid: str) -> tuple[float, float, int, int, int] | None:
        with self._lock:
            entry = self._senders.get(sid)
            if entry is None:
                return None
            return entry.start, entry.last, entry.day, entry.used, entry.waiting
