"""The sender reputation in a dict: for tests, the demo, and a threads or solo pool (one
process). Mirrors ``lua/count.lua`` (the contract tests run both)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any

from mailer.records.reputation.base import Counted, Limits, Pause, Standing, crossed, oldest_bucket


@dataclass
class _Sender:
    name: str
    current: int = 0
    buckets: dict[int, dict[str, int]] = field(default_factory=dict)
    pause: Pause | None = None

    def totals(self) -> dict[str, int]:
        return {e: sum(b.get(e, 0) for b in self.buckets.values()) for e in "sbc"}


class MemoryReputationStore:
    """:class:`~mailer.records.reputation.base.ReputationStore` in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._senders: dict[str, _Sender] = {}
        self._marks: dict[int, dict[str, tuple[str, str]]] = {}

    def count(
        self,
        sid: str,
        sender: str,
        events: str,
        *,
        now: float,
        limits: Limits,
        mark: tuple[str, str] | None = None,
    ) -> Counted:
        bucket = limits.bucket_of(now)
        with self._lock:
            entry = self._senders.setdefault(sid, _Sender(sender, bucket))
            bucket = max(bucket, entry.current)
            entry.current = bucket
            for old in [b for b in entry.buckets if b < oldest_bucket(bucket)]:
                del entry.buckets[old]
            counts = entry.buckets.setdefault(bucket, {})
            for event in events:
                counts[event] = counts.get(event, 0) + 1
            if mark is not None:
                self._marks.setdefault(bucket, {})[mark[0]] = (sender, mark[1])
                for old in [b for b in self._marks if b < oldest_bucket(bucket)]:
                    del self._marks[old]
            return self._judge(entry, now, limits)

    def _judge(self, entry: _Sender, now: float, limits: Limits) -> Counted:
        totals = entry.totals()
        counts = Standing(entry.name, totals["s"], totals["b"], totals["c"])
        rate, value, threshold = crossed(counts, limits)
        paused = entry.pause is not None and entry.pause.paused
        transition: Any = ""
        if rate and not paused:
            entry.pause = Pause(True, entry.name, rate, value, threshold, since=now)
            transition = "paused"
        elif not rate and paused:
            entry.pause = Pause(False, entry.name, lifted_at=now, lifted_by="auto")
            transition = "lifted"
        return Counted(replace(counts, pause=entry.pause), transition)

    def attribute(self, mark: str, now: float, limits: Limits) -> tuple[str, str] | None:
        oldest = oldest_bucket(limits.bucket_of(now))
        with self._lock:
            for bucket in sorted(self._marks, reverse=True):
                found = self._marks[bucket].get(mark)
                if bucket >= oldest and found is not None:
                    return found
        return None

    def resume(self, sid: str, sender: str, by: str, now: float, limits: Limits) -> Standing:
        self.count(sid, sender, "", now=now, limits=limits)
        with self._lock:
            entry = self._senders[sid]
            totals = entry.totals()
            for counts in entry.buckets.values():
                counts.pop("b", None)
                counts.pop("c", None)
            forgiven = {"bounced": totals["b"], "complained": totals["c"]}
            entry.pause = Pause(False, sender, lifted_at=now, lifted_by=by, forgiven=forgiven)
            return Standing(sender, totals["s"], 0, 0, entry.pause)

    def senders(self) -> list[tuple[str, str]]:
        with self._lock:
            return [(sid, entry.name) for sid, entry in self._senders.items()]

    def state_read(self, sid: str) -> tuple[Any, str] | None:
        return None

    def pause_of(self, sid: str) -> Pause | None:
        with self._lock:
            entry = self._senders.get(sid)
            return None if entry is None else entry.pause
