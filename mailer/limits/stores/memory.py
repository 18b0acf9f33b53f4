"""In-process store for a policy of recipient sliding tiers only: a dict of sliding logs behind
one lock, one log per recipient (:mod:`mailer.limits.sliding_log`).

Correct only when every sender shares this process (tests, the demo, a threads or solo Celery
pool). Two processes each holding one of these enforce the limit twice over, each on its own:
use Redis for a prefork pool or several workers. A store used in a process forked after it was
built warns (``RuntimeWarning``) once, because that is exactly this mistake.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Sequence

from mailer.clock import Clock, system_clock, to_us
from mailer.limits import ordering, sliding_log
from mailer.limits.decision import Decision, new_decision
from mailer.limits.keys import KeyHasher
from mailer.limits.policy import Policy
from mailer.limits.sliding_log import RawDecision, TierSpec

_fork_generation = 0


def _after_fork_in_child() -> None:
    global _fork_generation  # noqa: PLW0603 - one flag per process, flipped by the fork hook
    _fork_generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)

#: Every this many acquires, up to twice as many idle logs are evicted (bounded work per call).
_EVICT_EVERY = 32


def fork_generation() -> int:
    """How many forks this process is from the first: a store built in another generation was
    built before a fork (see :func:`warn_forked`)."""
    return _fork_generation


def warn_forked() -> None:
    """Warn that an in-process store is used in a child forked after it was built."""
    warnings.warn(
        "the memory limiter backend was built before this process was forked: each "
        "process now limits on its own, so the limits are not enforced across them. "
        "Use a redis:// limiter URL with a prefork pool or several workers.",
        RuntimeWarning,
        stacklevel=4,
    )


class _Log:
    __slots__ = ("expires_ms", "orders", "tags", "ts")

    def __init__(self) -> None:
        self.ts: list[int] = []
        self.tags: list[int] = []
        self.expires_ms = 0
        #: The order stamps of its future bookings, by tag (:mod:`mailer.limits.ordering`).
        self.orders: dict[int, str] = {}


class SlidingMemoryStore:
    """Sliding logs in a dict, thread-safe, with an injected clock and bounded memory.

    A log is forgotten once its newest entry has left the longest window (checked every 32
    calls for up to 64 logs, least recently written first), so memory is bounded by the keys
    written within the longest window plus the booking horizon, as Redis TTLs would bound it.
    """

    url = "memory://"
    client = None
    #: Judges a late booked mail itself (``acquire(..., late_ms=)``): see sliding_log._held.
    judges_lateness = True
    #: Keeps a recipient's booked order (``acquire(..., order=)``): see mailer.limits.ordering.
    keeps_order = True

    def __init__(
        self,
        policy: Policy,
        *,
        clock: Clock | None = None,
        namespace: str = "mailguard",
        secret: str | bytes | None = None,
    ) -> None:
        self._hasher = KeyHasher(secret, namespace, policy.name)
        self._tiers = policy.tiers
        self._spec = TierSpec([(t.limit, t.window_ms) for t in policy.tiers])
        self._clock = clock or system_clock
        self._logs: OrderedDict[bytes, _Log] = OrderedDict()
        self._lock = threading.Lock()
        self._generation = _fork_generation
        self._until_evict = _EVICT_EVERY

    def __len__(self) -> int:
        """How many keys are held now (idle ones may linger until evicted)."""
        return len(self._logs)

    def now(self) -> float:
        """The clock this store decides on (epoch seconds)."""
        return self._clock()

    def acquire(
        self,
        recipient: str,
        tag: int,
        max_wait_ms: int,
        tenant: str | None = None,  # no tenant scope in this shape
        *,
        share: float = 1.0,  # the recipient's own budget: no share
        not_before_ms: int = 0,
        provider: str | None = None,  # no provider scope in this shape
        late_ms: int = -1,
        order: str = "",
    ) -> Decision:
        if self._generation != _fork_generation:
            self._generation = _fork_generation
            warn_forked()
        key = self._hasher.digest(recipient)
        spec = self._spec
        keep = ordering.ORDER_GRACE_MS if order and late_ms >= 0 else 0
        with self._lock:
            now_us = to_us(self._clock())
            now, hi = now_us // 1000, -(-now_us // 1000)  # never early: now down, stored up
            logs = self._logs
            stored = logs.get(key)
            if stored is None:
                log = stored = logs[key] = _Log()
            elif stored.ts and stored.ts[0] <= now - spec.max_window_ms:
                log = _pruned(stored, now, spec.max_window_ms, keep)
            else:
                log = stored
            if order and tag and late_ms >= 0:
                raw = _ordered(log, tag, order, now, hi, spec, max_wait_ms, not_before_ms, late_ms)
            else:
                raw = sliding_log.acquire(
                    log.ts, log.tags, now, spec, tag, max_wait_ms, hi, not_before_ms, late_ms
                )
            if order and raw[1] and tag:
                raw = _in_order(log, raw, tag, order, now, hi, not_before_ms, spec)
            if log is not stored:  # written back only when the decision changed it
                log = _written(stored, log, now, spec.max_window_ms)
            if raw[0] or raw[1]:  # a stamped late call's bookings are kept ORDER_GRACE_MS
                log.expires_ms = log.ts[-1] + max(spec.max_window_ms, keep)
                logs.move_to_end(key)
            elif not log.ts:
                del logs[key]
            self._until_evict -= 1
            if not self._until_evict:
                self._until_evict = _EVICT_EVERY
                self._evict(now)
        index = raw[4]
        tier, scope = (self._tiers[index - 1], "recipient") if index else (None, None)
        return new_decision((raw[0] == 1, raw[1] == 1, raw[2], raw[3], tier, raw[5:], scope))

    def acquire_many(
        self, recipients: Sequence[str], tags: Sequence[int], max_wait_ms: int
    ) -> list[Decision]:
        return [
            self.acquire(r, tag, max_wait_ms, None) for r, tag in zip(recipients, tags, strict=True)
        ]

    def peek(
        self,
        recipient: str,
        tenant: str | None = None,  # no tenant scope in this shape
        *,
        share: float = 1.0,  # the recipient's own budget: no share
        domain: str | None = None,  # no domain scope in this shape
        provider: str | None = None,  # no provider scope in this shape
    ) -> Decision:
        key = self._hasher.digest(recipient)
        with self._lock:
            now_us = to_us(self._clock())
            now, hi = now_us // 1000, -(-now_us // 1000)
            log = self._logs.get(key)
            if log is None:
                return self._decision(sliding_log.peek([], now, self._spec))
            ts = list(log.ts)
            sliding_log.prune(ts, list(log.tags), now, self._spec.max_window_ms)
            return self._decision(sliding_log.peek(ts, now, self._spec, hi))

    def release(
        self,
        recipient: str,
        tag: int,
        tenant: str | None,
        provider: str | None = None,  # no provider scope in this shape
    ) -> bool:
        key = self._hasher.digest(recipient)
        with self._lock:
            log = self._logs.get(key)
            if log is None:
                return False
            now = to_us(self._clock()) // 1000
            view = _pruned(log, now, self._spec.max_window_ms, 0)
            released = sliding_log.release(view.ts, view.tags, tag)
            if view is not log:
                _written(log, view, now, self._spec.max_window_ms)
            if not log.ts:
                del self._logs[key]
            return released

    def storage_key(self, scope: str, key: str) -> str:
        if scope != "recipient":
            raise ValueError(f"policy {', '.join(map(str, self._tiers))} has no scope {scope!r}")
        return self._hasher.storage_key(key)

    def reset(self, recipient: str | None) -> None:
        with self._lock:
            if recipient is None:
                self._logs.clear()
            else:
                self._logs.pop(self._hasher.digest(recipient), None)

    def close(self) -> None:
        self.reset(None)

    def _decision(self, raw: RawDecision) -> Decision:
        """(allowed, booked, at_ms, wait_ms, tier index, *remaining) as a decision."""
        index = raw[4]
        tier = self._tiers[index - 1] if index else None
        scope = "recipient" if index else None
        return new_decision((raw[0] == 1, raw[1] == 1, raw[2], raw[3], tier, raw[5:], scope))

    def _evict(self, now_ms: int) -> None:
        logs = self._logs
        for _ in range(2 * _EVICT_EVERY):
            if not logs:
                return
            key, log = next(iter(logs.items()))
            if log.expires_ms > now_ms:
                return
            del logs[key]


def _in_order(  # noqa: PLR0917 - one call from acquire, under its lock
    log: _Log,
    raw: RawDecision,
    tag: int,
    order: str,
    now: int,
    hi: int,
    not_before_ms: int,
    spec: TierSpec,
) -> RawDecision:
    """A booking's answer after :func:`~mailer.limits.ordering.keep_order`: the slot it holds
    then, its binding tier that of the entries before that slot (as when it was first booked)."""
    named = tag & sliding_log.TAG_BITS
    i = next(j for j, g in enumerate(log.tags) if g & sliding_log.TAG_BITS == named)
    k = ordering.keep_order(log.ts, log.tags, log.orders, i, order, hi, not_before_ms)
    if k == i:
        return raw
    at = log.ts[k]
    tier = sliding_log.earliest(log.ts[:k], now, spec, hi)[1]
    return (0, 1, at, at - now, tier, *sliding_log.remaining(log.ts, at, spec))


def _ordered(  # noqa: PLR0917 - one call from acquire, under its lock
    log: _Log,
    tag: int,
    order: str,
    now: int,
    hi: int,
    spec: TierSpec,
    max_wait_ms: int,
    not_before_ms: int,
    late_ms: int,
) -> RawDecision:
    """A stamped decision that judges late runs: a booking reached on time, or a mail not in
    the log, that waits behind an earlier mail's booking reached and not yet run
    (:func:`~mailer.limits.ordering.waits_behind`) goes behind that booking's place (judged
    again; or booked no earlier than :func:`~mailer.limits.sliding_log.behind`); anything
    else is decided as without a stamp."""
    ts, tags = log.ts, log.tags
    named = tag & sliding_log.TAG_BITS
    i = next((j for j, g in enumerate(tags) if g & sliding_log.TAG_BITS == named), None)
    if i is None:
        if ordering.waits_behind(ts, tags, log.orders, len(ts), order, now):
            not_before_ms = max(not_before_ms, sliding_log.behind(ts, tags, now, hi, spec))
    elif (
        tags[i] & sliding_log.BOOKED
        and ts[i] <= hi
        and now - ts[i] <= late_ms
        and ordering.waits_behind(ts, tags, log.orders, i, order, now)
    ):
        return sliding_log.judge(ts, tags, i, now, hi, spec, max_wait_ms)
    return sliding_log.acquire(ts, tags, now, spec, tag, max_wait_ms, hi, not_before_ms, late_ms)


def _pruned(log: _Log, now: int, max_window_ms: int, keep: int) -> _Log:
    """``log`` pruned for ``now`` (in place), keeping its bookings reached within ``keep`` ms
    (:func:`~mailer.limits.sliding_log.prune`); a call that keeps none (``keep`` 0) while the
    log holds such bookings works on a pruned copy instead (:func:`_written` writes it back
    only if the call changed it), as the Redis script reads them past and writes only a log it
    changed: a stamped call after it finds them as it would on Redis."""
    if keep or not _holds_kept(log, now, max_window_ms):
        sliding_log.prune(log.ts, log.tags, now, max_window_ms, keep)
        return log
    view = _Log()
    view.ts, view.tags, view.orders = list(log.ts), list(log.tags), log.orders
    sliding_log.prune(view.ts, view.tags, now, max_window_ms)
    return view


def _holds_kept(log: _Log, now: int, max_window_ms: int) -> bool:
    """Whether ``log`` holds a booking past the longest window that a stamped call keeps."""
    cut, oldest = now - max_window_ms, now - ordering.ORDER_GRACE_MS
    return any(
        oldest < t <= cut and g & sliding_log.BOOKED for t, g in zip(log.ts, log.tags, strict=True)
    )


def _written(stored: _Log, view: _Log, now: int, max_window_ms: int) -> _Log:
    """``stored`` after a call that worked on ``view`` (a pruned copy): ``view``'s entries
    when the call changed them, else ``stored`` as it was."""
    before = _Log()
    before.ts, before.tags = list(stored.ts), list(stored.tags)
    sliding_log.prune(before.ts, before.tags, now, max_window_ms)
    if (before.ts, before.tags) != (view.ts, view.tags):
        stored.ts, stored.tags = view.ts, view.tags
    return stored
