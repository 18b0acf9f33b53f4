"""The schedule inside one process: dicts under a lock, on an injected clock."""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from mailer.clock import Clock, system_clock
from mailer.records.schedule.base import PROMOTE_LEASE, TAKE_AHEAD, TAKE_LIMIT, ScheduleStats, Taken


class MemorySchedule:
    """:class:`~mailer.records.schedule.base.Schedule` in this process (demo, threads/solo pools).

    Only a worker in the same process can promote what it holds: a prefork child parks into
    its own copy, so the workers park into it only when their promoter runs in-process.
    """

    #: No Redis: only a promoter of this process sees it.
    client: Any = None
    url = "memory://"

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or system_clock
        self._lock = threading.Lock()
        self._due: dict[str, float] = {}
        self._promoting: dict[str, float] = {}  # mail id -> lease end
        self._payloads: dict[str, bytes] = {}
        self._dead: dict[str, bytes] = {}
        self._watch: dict[str, float] = {}  # mail id -> when the watchdog may take it

    def park(self, mail_id: str, due: float, payload: bytes) -> None:
        with self._lock:
            self._promoting.pop(mail_id, None)
            self._watch.pop(mail_id, None)
            self._due[mail_id] = due
            self._payloads[mail_id] = payload

    def watch(self, mail_id: str, due: float, payload: bytes) -> None:
        with self._lock:
            self._promoting.pop(mail_id, None)
            self._due.pop(mail_id, None)
            self._watch[mail_id] = due
            self._payloads[mail_id] = payload

    def running(self, mail_id: str, lease: float) -> bool:
        with self._lock:
            if mail_id not in self._watch:
                return False
            self._watch[mail_id] = self._clock() + lease
            return True

    def forget(self, mail_id: str) -> bool:
        with self._lock:
            self._watch.pop(mail_id, None)
            self._promoting.pop(mail_id, None)
            self._due.pop(mail_id, None)
            return self._payloads.pop(mail_id, None) is not None

    def release(self, taken: Sequence[Taken], after: float) -> int:
        with self._lock:
            at = self._clock() + after
            back = [t for t in taken if self._promoting.pop(t.mail_id, None) is not None]
            for entry in back:
                if entry.watched:
                    self._watch[entry.mail_id] = at
                else:
                    self._due[entry.mail_id] = at
            return len(back)

    def take_due(
        self, limit: int = TAKE_LIMIT, lease: float = PROMOTE_LEASE, ahead: float = TAKE_AHEAD
    ) -> list[Taken]:
        with self._lock:
            now = self._clock()
            # One order for both, as the Redis schedule's one sorted set: due time or lease end.
            scored = [*self._due.items(), *self._promoting.items()]
            ready = heapq.nsmallest(
                limit,
                (item for item in scored if item[1] <= now + ahead),
                key=lambda item: (item[1], item[0]),
            )
            ids = [mail_id for mail_id, _ in ready]
            # Then the watchdog's: watches whose time passed, never ahead (take.lua alike).
            overdue = [item for item in self._watch.items() if item[1] <= now]
            watched = [m for m, _ in sorted(overdue, key=lambda i: (i[1], i[0]))]
            watched = watched[: limit - len(ids)]
            for mail_id in [*ids, *watched]:
                self._due.pop(mail_id, None)
                self._watch.pop(mail_id, None)
                self._promoting[mail_id] = now + lease
            return [
                *(Taken(m, self._payloads.get(m)) for m in ids),
                *(Taken(m, self._payloads.get(m), True) for m in watched),
            ]

    def parked_payloads_key(self) -> str | None:
        return None

    def next_due(self, stale: float = 0.0) -> float | None:
        with self._lock:
            return min(
                [*self._due.values(), *self._promoting.values(), *self._watch.values()],
                default=None,
            )

    def done(self, mail_ids: Sequence[str]) -> int:
        with self._lock:
            gone = [m for m in mail_ids if self._promoting.pop(m, None) is not None]
            for mail_id in gone:
                self._payloads.pop(mail_id, None)
            return len(gone)

    def bury(self, mail_id: str) -> None:
        with self._lock:
            self._promoting.pop(mail_id, None)
            self._dead[mail_id] = self._payloads.pop(mail_id, b"")

    def cancel(self, mail_id: str) -> bytes | None:
        with self._lock:
            self._due.pop(mail_id, None)
            self._promoting.pop(mail_id, None)
            self._watch.pop(mail_id, None)
            return self._payloads.pop(mail_id, None)

    def payload(self, mail_id: str) -> bytes | None:
        with self._lock:
            return self._payloads.get(mail_id)

    def stats(self) -> ScheduleStats:
        with self._lock:
            times = [*self._due.values(), *self._promoting.values(), *self._watch.values()]
            earliest = min(times, default=None)
            counts = len(self._due), len(self._promoting), len(self._dead)
            return ScheduleStats(*counts, earliest, len(self._watch))

    def scan(self) -> Iterator[tuple[str, float | None, bytes]]:
        with self._lock:
            rows = [(m, self._due.get(m, self._watch.get(m)), p) for m, p in self._payloads.items()]
        yield from rows

    def dead_letters(self, limit: int = 100) -> list[tuple[str, bytes]]:
        with self._lock:
            return list(self._dead.items())[:limit]
