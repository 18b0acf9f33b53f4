"""The outbox inside one process: dicts under a lock, on an injected clock."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from mailer.clock import Clock, system_clock
from mailer.records.outbox.base import (
    CLEARED_TTL,
    LANES,
    ORDER_SLACK,
    OUTBOX_TTL,
    OVERDUE_LIMIT,
    Overdue,
    Pending,
)


class MemoryOutbox:
    """:class:`~mailer.records.outbox.base.Outbox` in this process (demo, embedded workers).

    Only a promoter in the same process can publish its entries again; and an in-process broker
    cannot lose a popped message, so it matters only to tests and to a network broker used
    with memory stores by one process.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or system_clock
        self._lock = threading.Lock()
        self._at: dict[str, dict[str, float]] = {lane: {} for lane in LANES}
        self._payloads: dict[str, bytes] = {}
        self._marks: dict[str, float] = {}
        self._cleared: dict[str, float] = {}  # mail id -> when a receipt found no entry

    def put(self, mail_id: str, lane: str, payload: bytes) -> None:
        with self._lock:
            cleared = self._cleared.pop(mail_id, None)
            if cleared is not None and cleared > self._clock() - CLEARED_TTL:
                return
            for entries in self._at.values():
                entries.pop(mail_id, None)
            self._at.setdefault(lane, {})[mail_id] = self._clock()
            self._payloads[mail_id] = payload

    def put_later(self, mail_id: str, lane: str, payload: bytes) -> None:
        self.put(mail_id, lane, payload)

    def settle(self) -> None:
        """Nothing to wait for: every put is made at once."""

    def received(self, mail_id: str, lane: str) -> bool:
        with self._lock:
            at = self._remove(mail_id, lane)
            if at is None:
                now = self._clock()
                for old in [m for m, when in self._cleared.items() if when <= now - CLEARED_TTL]:
                    del self._cleared[old]
                self._cleared[mail_id] = now
                return False
            self._marks[lane] = max(self._marks.get(lane, at), at)
            return True

    def received_later(self, mail_id: str, lane: str) -> None:
        self.received(mail_id, lane)

    def discard(self, mail_id: str, lane: str) -> bool:
        with self._lock:
            return self._remove(mail_id, lane) is not None

    def _remove(self, mail_id: str, lane: str) -> float | None:
        self._payloads.pop(mail_id, None)
        return self._at.get(lane, {}).pop(mail_id, None)

    def overdue(
        self,
        grace: float,
        *,
        drained: bool = False,
        limit: int = OVERDUE_LIMIT,
        slack: float = ORDER_SLACK,
    ) -> Overdue:
        with self._lock:
            now = self._clock()
            self._expire(now)
            cutoff = now - grace
            popped: list[Pending] = []
            waiting = 0
            for lane in LANES:
                bound = cutoff
                if not drained:
                    bound = min(cutoff, self._marks.get(lane, float("-inf")) - slack)
                old = sorted((at, m) for m, at in self._at[lane].items() if at <= cutoff)
                shown = [Pending(m, lane, at) for at, m in old if at <= bound]
                popped.extend(shown[: max(limit - len(popped), 0)])
                waiting += len(old) - len(shown)
            return Overdue(popped, waiting)

    def _expire(self, now: float) -> None:
        for entries in self._at.values():
            for mail_id in [m for m, at in entries.items() if at <= now - OUTBOX_TTL]:
                entries.pop(mail_id)
                self._payloads.pop(mail_id, None)

    def take(self, pending: Sequence[Pending], grace: float) -> list[tuple[Pending, bytes]]:
        with self._lock:
            now = self._clock()
            taken: list[tuple[Pending, bytes]] = []
            for entry in pending:
                entries = self._at.get(entry.lane, {})
                at = entries.get(entry.mail_id)
                payload = self._payloads.get(entry.mail_id)
                if at is not None and payload is None:  # cleared from another lane: gone
                    entries.pop(entry.mail_id)
                if at is None or at > now - grace or payload is None:
                    continue
                entries[entry.mail_id] = now
                taken.append((Pending(entry.mail_id, entry.lane, now), payload))
            return taken

    def size(self) -> int:
        with self._lock:
            return sum(len(entries) for entries in self._at.values())

    #: No Redis: only this process sees it.
    client: Any = None

    @property
    def server(self) -> dict[str, Any]:
        return {}

    def put_command(self, mail_id: str, lane: str, payload: bytes) -> tuple[Any, ...] | None:
        return None

    def close(self) -> None:
        return None

    def unconfirmed_receipts(self) -> list[tuple[str, str]]:
        return []

    def is_empty(self) -> bool:
        return self.size() == 0
