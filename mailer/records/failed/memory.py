"""The kept failed mails inside one process (tests, an in-process worker), on an injected
clock. Not for several processes: each keeps its own."""

from __future__ import annotations

import threading

from mailer.clock import Clock, system_clock
from mailer.records.failed.base import SINCE_LIMIT


class MemoryFailedStore:
    """:class:`~mailer.records.failed.base.FailedStore` in a dict; an entry ends when the clock
    passes its retention."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or system_clock
        self._lock = threading.Lock()
        #: mail id -> (payload, failed at, expires at)
        self._kept: dict[str, tuple[bytes, float, float]] = {}
        #: mail id -> (retried as, expires at)
        self._marks: dict[str, tuple[str, float]] = {}

    def _expire(self, now: float) -> None:
        self._kept = {k: v for k, v in self._kept.items() if v[2] > now}
        self._marks = {k: v for k, v in self._marks.items() if v[1] > now}

    def keep(self, mail_id: str, payload: bytes, *, failed_at: float, retention: float) -> bool:
        with self._lock:
            now = self._clock()
            self._expire(now)
            if mail_id in self._kept or mail_id in self._marks:
                return False
            self._kept[mail_id] = (bytes(payload), failed_at, now + retention)
            return True

    def take(self, mail_id: str, retried_as: str, retention: float) -> bytes | None:
        with self._lock:
            now = self._clock()
            self._expire(now)
            kept = self._kept.pop(mail_id, None)
            if kept is None:
                return None
            self._marks[mail_id] = (retried_as, now + retention)
            return kept[0]

    def give_back(
        self, mail_id: str, payload: bytes, *, failed_at: float, retention: float
    ) -> None:
        with self._lock:
            self._marks.pop(mail_id, None)
            self._kept[mail_id] = (bytes(payload), failed_at, self._clock() + retention)

    def retried_as(self, mail_id: str) -> str | None:
        with self._lock:
            self._expire(self._clock())
            mark = self._marks.get(mail_id)
            return None if mark is None else mark[0]

    def failed_at(self, mail_id: str) -> float | None:
        with self._lock:
            self._expire(self._clock())
            kept = self._kept.get(mail_id)
            return None if kept is None else kept[1]

    def failed_since(self, since: float, limit: int = SINCE_LIMIT) -> list[str]:
        with self._lock:
            self._expire(self._clock())
            found = sorted((v[1], k) for k, v in self._kept.items() if v[1] >= since)
            return [mail_id for _, mail_id in found[:limit]]
