"""In-process limiter storage: a dict of sliding logs behind one lock.

Correct only when every sender shares this process (tests, the demo, a threads or solo Celery
pool). Two processes each holding one of these enforce the limit twice over, each on its own:
use the Redis backend for a prefork pool or several workers. A backend used in a process forked
after it was built warns (``RuntimeWarning``) once, because that is exactly this mistake.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Sequence

from mailer.clock import Clock, system_clock, to_us
from mailer.limits import sliding_log
from mailer.limits.sliding_log import RawDecision, TierSpec

_fork_generation = 0


def _after_fork_in_child() -> None:
    global _fork_generation  # noqa: PLW0603 - one flag per process, flipped by the fork hook
    _fork_generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)

#: Every this many acquires, up to twice as many idle logs are evicted (bounded work per call).
_EVICT_EVERY = 32


class _Log:
    __slots__ = ("expires_ms", "tags", "ts")

    def __init__(self) -> None:
        self.ts: list[int] = []
        self.tags: list[int] = []
        self.expires_ms = 0


class MemoryBackend:
    """Sliding logs in a dict, thread-safe, with an injected clock and bounded memory.

    A log is forgotten once its newest entry has left the longest window (checked every 32
    calls for up to 64 logs, least recently written first), so memory is bounded by the keys
    written within the longest window plus the booking horizon, as Redis TTLs would bound it.
    """

    url = "memory://"
    keys_as_digest = True

    def __init__(self, spec: TierSpec, clock: Clock | None = None) -> None:
        self._spec = spec
        self._clock = clock or system_clock
        self._logs: OrderedDict[bytes, _Log] = OrderedDict()
        self._lock = threading.Lock()
        self._generation = _fork_generation
        self._warned = False
        self._until_evict = _EVICT_EVERY

    def __len__(self) -> int:
        """How many keys are held now (idle ones may linger until evicted)."""
        return len(self._logs)

    def acquire(
        self, key: bytes, tag: int, max_wait_ms: int, not_before_ms: int = 0
    ) -> RawDecision:
        if self._generation != _fork_generation:
            self._warn_forked()
        spec = self._spec
        with self._lock:
            now_us = to_us(self._clock())
            now, hi = now_us // 1000, -(-now_us // 1000)  # never early: now down, stored up
            logs = self._logs
            log = logs.get(key)
            if log is None:
                log = logs[key] = _Log()
            elif log.ts and log.ts[0] <= now - spec.max_window_ms:
                sliding_log.prune(log.ts, log.tags, now, spec.max_window_ms)
            answer = sliding_log.acquire(
                log.ts, log.tags, now, spec, tag, max_wait_ms, hi, not_before_ms
            )
            if answer[0] or answer[1]:
                log.expires_ms = log.ts[-1] + spec.max_window_ms
                logs.move_to_end(key)
            elif not log.ts:
                del logs[key]
            self._until_evict -= 1
            if not self._until_evict:
                self._until_evict = _EVICT_EVERY
                self._evict(now)
            return answer

    def acquire_many(
        self, items: Sequence[tuple[bytes, int]], max_wait_ms: int
    ) -> list[RawDecision]:
        return [self.acquire(key, tag, max_wait_ms) for key, tag in items]

    def peek(self, key: bytes) -> RawDecision:
        with self._lock:
            now_us = to_us(self._clock())
            now, hi = now_us // 1000, -(-now_us // 1000)
            log = self._logs.get(key)
            if log is None:
                return sliding_log.peek([], now, self._spec)
            ts = list(log.ts)
            sliding_log.prune(ts, list(log.tags), now, self._spec.max_window_ms)
            return sliding_log.peek(ts, now, self._spec, hi)

    def release(self, key: bytes, tag: int) -> bool:
        with self._lock:
            log = self._logs.get(key)
            if log is None:
                return False
            now = to_us(self._clock()) // 1000
            sliding_log.prune(log.ts, log.tags, now, self._spec.max_window_ms)
            if not sliding_log.release(log.ts, log.tags, tag):
                if not log.ts:
                    del self._logs[key]
                return False
            if not log.ts:
                del self._logs[key]
            return True

    def reset(self, key: bytes) -> None:
        with self._lock:
            self._logs.pop(key, None)

    def close(self) -> None:
        with self._lock:
            self._logs.clear()

    def _evict(self, now_ms: int) -> None:
        logs = self._logs
        for _ in range(2 * _EVICT_EVERY):
            if not logs:
                return
            key, log = next(iter(logs.items()))
            if log.expires_ms > now_ms:
                return
            del logs[key]

    def _warn_forked(self) -> None:
        self._generation = _fork_generation
        if not self._warned:
            self._warned = True
            warnings.warn(
                "the memory limiter backend was built before this process was forked: each "
                "process now limits on its own, so the limits are not enforced across them. "
                "Use a redis:// limiter URL with a prefork pool or several workers.",
                RuntimeWarning,
                stacklevel=3,
            )
