"""Holds in a dict: for tests, the demo, and a threads or solo pool (one process)."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from mailer.clock import Clock, system_clock
from mailer.records.holds.base import Hold, next_hold
from mailer.records.holds.transport import claim_probe, start_transport

#: Past this many holds, the ones no longer remembered are forgotten at the next put.
FORGET_AFTER = 10_000
#: The end of the key of a hold kept until lifted (the transport's), never forgotten so.
KEPT = ":hold:{transport}"


class MemoryHoldStore:
    """:class:`~mailer.records.holds.base.HoldStore` in this process, on ``clock``."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or system_clock
        self._lock = threading.Lock()
        self._holds: dict[str, Hold] = {}
        self._evidence: dict[str, dict[str, float]] = {}

    def put(
        self,
        key: str,
        now: float,
        seconds: float,
        max_hold: float,
        cause: str,
        *,
        asked: float | None = None,
        stated: bool = False,
    ) -> Hold:
        with self._lock:
            previous = self._holds.get(key)
            hold = next_hold(previous, now, seconds, max_hold, cause, asked=asked, stated=stated)
            if hold is previous:
                return hold
            self._holds[key] = hold
            if len(self._holds) > FORGET_AFTER:
                now = self._clock()
                self._holds = {
                    k: h for k, h in self._holds.items() if h.remembered(now) or KEPT in k
                }
            return replace(hold, written=True)

    def get(self, keys: list[str]) -> list[Hold | None]:
        with self._lock:
            return [self._holds.get(key) for key in keys]

    def witness(self, key: str, member: str, now: float, window: float, count: int) -> int:
        with self._lock:
            seen = self._evidence.setdefault(key, {})
            seen[member] = now
            for old in [m for m, at in seen.items() if at <= now - window]:
                del seen[old]
            distinct = len(seen)
            if distinct >= count:
                del self._evidence[key]
            return distinct

    def start(self, key: str, now: float, seconds: float, cause: str, *, keep: float) -> Hold:
        with self._lock:
            hold = start_transport(self._holds.get(key), now, seconds, cause)
            self._holds[key] = replace(hold, written=False)
            return hold

    def claim(self, key: str, now: float, max_hold: float, *, keep: float) -> Hold | None:
        with self._lock:
            hold = claim_probe(self._holds.get(key), now, max_hold)
            if hold is not None:
                self._holds[key] = replace(hold, written=False)
            return hold

    def lift(self, key: str) -> bool:
        with self._lock:
            return self._holds.pop(key, None) is not None

    def scan(self, prefix: str) -> list[tuple[str, Hold]]:
        with self._lock:
            return [(key, hold) for key, hold in self._holds.items() if key.startswith(prefix)]

    def shared_client(self) -> Any:
        return None
