"""Holds in a dict: for tests, the demo, and a threads or solo pool (one process)."""

from __future__ import annotations

import threading
from typing import Any

from mailer.clock import Clock, system_clock
from mailer.records.holds.base import Hold, next_hold

#: Past this many holds, the ended ones are forgotten at the next put.
FORGET_AFTER = 10_000


class MemoryHoldStore:
    """:class:`~mailer.records.holds.base.HoldStore` in this process, on ``clock``."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or system_clock
        self._lock = threading.Lock()
        self._holds: dict[str, Hold] = {}

    def put(self, key: str, now: float, seconds: float, max_hold: float, cause: str) -> Hold:
        with self._lock:
            hold = next_hold(self._holds.get(key), now, seconds, max_hold, cause)
            self._holds[key] = hold
            if len(self._holds) > FORGET_AFTER:
                now = self._clock()
                self._holds = {k: h for k, h in self._holds.items() if h.until > now}
            return hold

    def get(self, keys: list[str]) -> list[Hold | None]:
        with self._lock:
            return [self._holds.get(key) for key in keys]

    def shared_client(self) -> Any:
        return None
