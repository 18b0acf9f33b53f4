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

from mailer import sliding_log
from mailer.clock import Clock, system_clock, to_ms
from mailer.sliding_log import RawDecision, TierSpec

_fork_generation = 0


def _after_fork_in_child() -> None:
    global _fork_generation  # noqa: PLW0603 - one flag per process, flipped by the fork hook
    _fork_generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)

#: How many idle logs one call may evict, so that eviction work stays bounded per call.
_EVICT_PER_CALL = 4


class _Log:
    __slots__ = ("expires_ms", "tags", "ts")

    def __init__(self) -> None:
        self.ts: list[int] = []
        self.tags: list[int] = []
        self.expires_ms = 0


class MemoryBackend:
    """Sliding logs in a dict, thread-safe, with an injected clock and bounded memory.

    A log is forgotten once its newest entry has left the longest window (checked for a few
    logs per call, oldest written first), so memory is bounded by the keys written within the
    longest window plus the booking horizon, as Redis TTLs would bound it.
    """

    url = "memory://"

    def __init__(self, spec: TierSpec, clock: Clock | None = None) -> None:
        self._spec = spec
        self._clock = clock or system_clock
        self._logs: OrderedDict[str, _Log] = OrderedDict()
        self._lock = threading.Lock()
        self._generation = _fork_generation
        self._warned = False

    def __len__(self) -> int:
        """How many keys are held now (idle ones may linger until evicted)."""
        return len(self._logs)

    def acquire(self, key: str, tag: int, max_wait_ms: int) -> RawDecision:
        if self._generation != _fork_generation:
            self._warn_forked()
        spec = self._spec
        with self._lock:
            now = to_ms(self._clock())
            logs = self._logs
            log = logs.get(key)
            if log is None:
                log = logs[key] = _Log()
            else:
                sliding_log.prune(log.ts, log.tags, now, spec.max_window_ms)
            answer = sliding_log.acquire(log.ts, log.tags, now, spec, tag, max_wait_ms)
            if answer[0] or answer[1]:
                log.expires_ms = log.ts[-1] + spec.max_window_ms
                logs.move_to_end(key)
            elif not log.ts:
                del logs[key]
            self._evict(now)
            return answer

    def acquire_many(self, items: Sequence[tuple[str, int]], max_wait_ms: int) -> list[RawDecision]:
        return [self.acquire(key, tag, max_wait_ms) for key, tag in items]

    def peek(self, key: str) -> RawDecision:
        with self._lock:
            now = to_ms(self._clock())
            log = self._logs.get(key)
            if log is None:
                return sliding_log.peek([], now, self._spec)
            ts = list(log.ts)
            sliding_log.prune(ts, list(log.tags), now, self._spec.max_window_ms)
            return sliding_log.peek(ts, now, self._spec)

    def release(self, key: str, tag: int) -> bool:
        with self._lock:
            log = self._logs.get(key)
            if log is None:
                return False
            now = to_ms(self._clock())
            sliding_log.prune(log.ts, log.tags, now, self._spec.max_window_ms)
            if not sliding_log.release(log.ts, log.tags, tag):
                if not log.ts:
                    del self._logs[key]
                return False
            if not log.ts:
                del self._logs[key]
            return True

    def reset(self, key: str) -> None:
        with self._lock:
            self._logs.pop(key, None)

    def close(self) -> None:
        with self._lock:
            self._logs.clear()

    def _evict(self, now_ms: int) -> None:
        logs = self._logs
        for _ in range(_EVICT_PER_CALL):
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
