"""The sliding-log algorithm, pure: one decision over every tier of a policy, no I/O, no clock.

A key's log is its admission times in milliseconds, oldest first, each with a 48-bit tag
derived from the mail id (0 for none). Entries older than the longest window are pruned; since
no window ever holds more than its limit, a log holds at most the longest window's limit of past
entries (10 for the reference policy), plus the bookings still in the future. Nothing else is
trimmed: dropping an entry a window can still see would let a later ``release`` over-admit.

Appending an entry at ``x`` (never before the newest entry) breaks tier ``(L, W)`` only if the
log has ``n >= L`` entries and ``ts[n-L] > x - W``. So the earliest admissible time is::

    t* = max(now, ts[-1], max over tiers with n >= L of ts[n-L] + W)

This module is the reference the Redis script (``stores/lua/sliding_log.lua``) mirrors line
for line; the shared test suite checks that both give identical answers on the same traces.
Raw answers are tuples ``(allowed, booked, at_ms, wait_ms, tier_index, *remaining)`` with
``tier_index`` 1-based (0: none), the Redis script's reply format.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

#: A raw answer: (allowed, booked, at_ms, wait_ms, tier_index, *remaining), all ints.
RawDecision = tuple[int, ...]


class TierSpec:
    """The numbers of a policy that the algorithm needs, precomputed once per limiter."""

    __slots__ = ("limits", "max_window_ms", "pairs", "windows")

    def __init__(self, pairs: Sequence[tuple[int, int]]) -> None:
        self.pairs = tuple(pairs)
        self.limits = tuple(limit for limit, _ in self.pairs)
        self.windows = tuple(window for _, window in self.pairs)
        self.max_window_ms = max(self.windows)


def prune(ts: list[int], tags: list[int], now_ms: int, max_window_ms: int) -> None:
    """Drop, in place, the entries that no window ending at or after ``now_ms`` can see."""
    cut = bisect_right(ts, now_ms - max_window_ms)
    if cut:
        del ts[:cut]
        del tags[:cut]


def remaining(ts: list[int], at_ms: int, spec: TierSpec) -> tuple[int, ...]:
    """Per tier, how many more entries the window ending at ``at_ms`` holds (bookings count)."""
    n = len(ts)
    out = []
    for limit, window in spec.pairs:
        room = limit - n + bisect_right(ts, at_ms - window)
        out.append(room if room > 0 else 0)
    return tuple(out)


def earliest(
    ts: list[int],
    now_ms: int,
    spec: TierSpec,
    now_hi: int | None = None,
    not_before_ms: int = 0,
) -> tuple[int, int]:
    """Return ``(t*, tier_index)``: the earliest admissible time and the 1-based binding tier.

    The binding tier is the one whose own wait is longest (the first such on ties); 0 when no
    tier makes the attempt wait (allowed now, or only the order of booked entries binds, or a
    hold: ``not_before_ms``). ``now_hi`` is now rounded up (the ms an admission now is stored
    at; default ``now_ms``): an entry at most there does not keep a new one from going now.
    ``not_before_ms`` (epoch ms, 0: none) is the earliest time the caller accepts (a hold's
    end): every time at or after ``t*`` admits, so the answer is simply the later of the two.
    """
    n = len(ts)
    t = now_ms
    if n and ts[-1] > (now_ms if now_hi is None else now_hi):
        t = ts[-1]
    tier = 0
    bind_t = now_ms
    for index, (limit, window) in enumerate(spec.pairs, start=1):
        if n >= limit:
            candidate = ts[n - limit] + window
            if candidate > bind_t:
                bind_t = candidate
                tier = index
    t = max(t, bind_t)
    if not_before_ms > t:
        return not_before_ms, 0
    return t, tier


def acquire(  # noqa: PLR0917 - positional: the memory store's hot path (keywords cost more)
    ts: list[int],
    tags: list[int],
    now_ms: int,
    spec: TierSpec,
    tag: int,
    max_wait_ms: int,
    now_hi: int | None = None,
    not_before_ms: int = 0,
) -> RawDecision:
    """Decide for one attempt and record it in ``ts``/``tags`` (in place) if admitted or booked.

    ``ts`` must already be pruned for ``now_ms``. A non-zero ``tag`` already in the log returns
    that entry's slot and consumes nothing (idempotent per mail id). Never early: ``now_ms`` is
    now rounded down (every tier is checked against it) and ``now_hi`` now rounded up (an
    admission now is stored there; default ``now_ms``, a clock in whole ms). With
    ``not_before_ms`` (epoch ms) after now the mail is booked at the earliest admissible time
    at or after it (a hold), or refused past ``max_wait_ms``.
    """
    hi = now_ms if now_hi is None else now_hi
    if tag:
        for i, existing in enumerate(tags):
            if existing == tag:
                at = ts[i]
                wait = at - now_ms if at > hi else 0
                seen = at if at > hi else now_ms
                return (
                    int(at <= hi),
                    int(at > hi),
                    at,
                    wait,
                    0,
                    *remaining(ts, seen, spec),
                )
    t, tier = earliest(ts, now_ms, spec, hi, not_before_ms)
    if t == now_ms:
        ts.append(hi)
        tags.append(tag)
        return (1, 0, now_ms, 0, 0, *remaining(ts, now_ms, spec))
    if 0 < t - now_ms <= max_wait_ms:
        ts.append(t)
        tags.append(tag)
        return (0, 1, t, t - now_ms, tier, *remaining(ts, t, spec))
    return (0, 0, t, t - now_ms, tier, *remaining(ts, now_ms, spec))


def peek(ts: list[int], now_ms: int, spec: TierSpec, now_hi: int | None = None) -> RawDecision:
    """Answer as :func:`acquire` would for a fresh attempt, without recording anything."""
    t, tier = earliest(ts, now_ms, spec, now_hi)
    if t == now_ms:
        return (1, 0, now_ms, 0, 0, *remaining(ts, now_ms, spec))
    return (0, 0, t, t - now_ms, tier, *remaining(ts, now_ms, spec))


def release(ts: list[int], tags: list[int], tag: int) -> bool:
    """Remove, in place, the entry tagged ``tag``; return whether there was one."""
    for i, existing in enumerate(tags):
        if existing == tag:
            del ts[i]
            del tags[i]
            return True
    return False
