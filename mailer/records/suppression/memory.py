"""The suppression list in a dict: for tests, the demo, and a threads or solo pool (one
process)."""

from __future__ import annotations

import threading
from typing import Any

from mailer.records.suppression.base import Suppression, keeps


class MemorySuppressionStore:
    """:class:`~mailer.records.suppression.base.SuppressionStore` in this process. Entries stay
    until lifted or replaced; the list answers only those whose ``until`` is still ahead."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, Suppression] = {}

    def put(self, key: str, entry: Suppression, seconds: float) -> None:
        with self._lock:
            self._entries[key] = entry

    def put_longer(self, key: str, entry: Suppression, seconds: float, now: float) -> Suppression:
        with self._lock:
            old = self._entries.get(key)
            if old is not None and keeps(old, entry, now):
                return old
            self._entries[key] = entry
            return entry

    def get(self, key: str) -> Suppression | None:
        with self._lock:
            return self._entries.get(key)

    def delete(self, key: str) -> bool:
        with self._lock:
            return self._entries.pop(key, None) is not None

    def scan(self, prefix: str) -> list[tuple[str, Suppression]]:
        with self._lock:
            return [(k, e) for k, e in self._entries.items() if k.startswith(prefix)]

    def shared_client(self) -> Any:
        return None
