"""The sliding-log algorithm, pure: one recipient's decision over every tier of a policy of
recipient sliding tiers only, no I/O, no clock.

A key's log is its admission times in milliseconds, oldest first, each with a 48-bit tag
derived from the mail id (0 for none); bit 47 of a stored tag flags a booking made under a mail
id whose mail has not been admitted yet (:data:`BOOKED`), so the log tells sent slots from
overdue bookings, and a late booked mail is judged against the slots sent (:func:`_held`).
Entries older than the longest window are pruned; since
no window ever holds more than its limit, a log holds at most the longest window's limit of past
entries (10 for the reference policy), plus the bookings still in the future. Nothing else is
trimmed: dropping an entry a window can still see would let a later ``release`` over-admit.

Appending an entry at ``x`` (never before the newest entry) breaks tier ``(L, W)`` only if the
log has ``n >= L`` entries and ``ts[n-L] > x - W``. So the earliest admissible time is::

    t* = max(now, ts[-1], max over tiers with n >= L of ts[n-L] + W)

(A late mail judged again is placed in time order among the entries, not appended: in its
recipient's booked order, among the sent entries and behind the bookings reached before it,
:func:`_judged`; the log stays sorted.)

This module is the reference the Redis script (``stores/lua/sliding_log.lua``) mirrors line
for line; the shared test suite checks that both give identical answers on the same traces.
Raw answers are tuples ``(allowed, booked, at_ms, wait_ms, tier_index, *remaining)`` with
``tier_index`` 1-based (0: none), the Redis script's reply format.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Sequence

from mailer.limits.insertion import earliest_insert, window_max

#: A raw answer: (allowed, booked, at_ms, wait_ms, tier_index, *remaining), all ints.
RawDecision = tuple[int, ...]
#: The flag of an entry *booked* under a mail id whose mail has not been admitted yet (bit 47 of
#: its stored tag): a sent slot and an overdue booking look alike otherwise.
BOOKED = 1 << 47
#: The bits of a tag that name its mail (a tag is compared without the flag).
TAG_BITS = BOOKED - 1


class TierSpec:
    """The numbers of a policy that the algorithm needs, precomputed once per limiter."""

    __slots__ = ("limits", "max_window_ms", "pairs", "windows")

    def __init__(self, pairs: Sequence[tuple[int, int]]) -> None:
        self.pairs = tuple(pairs)
        self.limits = tuple(limit for limit, _ in self.pairs)
        self.windows = tuple(window for _, window in self.pairs)
        self.max_window_ms = max(self.windows)


def prune(
    ts: list[int], tags: list[int], now_ms: int, max_window_ms: int, keep_booked_ms: int = 0
) -> None:
    """Drop, in place, the entries that no window ending at or after ``now_ms`` can see; with
    ``keep_booked_ms`` longer than the longest window, keep the bookings (flagged
    :data:`BOOKED`) reached less than that ago (a recipient's booked order waits for their
    runs: :mod:`mailer.limits.ordering`; they hold no window's room)."""
    cut = bisect_right(ts, now_ms - max_window_ms)
    if not cut:
        return
    if keep_booked_ms > max_window_ms:
        oldest = now_ms - keep_booked_ms
        kept = [j for j in range(cut) if tags[j] & BOOKED and ts[j] > oldest]
        if kept:
            ts[:cut] = [ts[j] for j in kept]
            tags[:cut] = [tags[j] for j in kept]
            return
    del ts[:cut]
    del tags[:cut]


def behind(ts: list[int], tags: list[int], now_ms: int, hi: int, spec: TierSpec) -> int:
    """The earliest ms at which a mail fits after the places of the bookings reached and not
    yet run (each where its run would place it, in order: as :func:`_judged` places them), among
    the entries sent: where a mail that waits behind them may go first."""
    placed = [t for t, g in zip(ts, tags, strict=True) if not g & BOOKED]
    lb = now_ms
    for t, g in zip(ts, tags, strict=True):
        if g & BOOKED and t <= hi:
            lb = _stored(_fit(placed, lb, now_ms, hi, spec), now_ms, hi)
            insort(placed, lb)
    return _fit(placed, lb, now_ms, hi, spec)


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
    late_ms: int = -1,
) -> RawDecision:
    """Decide for one attempt and record it in ``ts``/``tags`` (in place) if admitted or booked.

    ``ts`` must already be pruned for ``now_ms``. A non-zero ``tag`` already in the log returns
    that entry's slot and consumes nothing (idempotent per mail id). Never early: ``now_ms`` is
    now rounded down (every tier is checked against it) and ``now_hi`` now rounded up (an
    admission now is stored there; default ``now_ms``, a clock in whole ms). With
    ``not_before_ms`` (epoch ms) after now the mail is booked at the earliest admissible time
    at or after it (a hold), or refused past ``max_wait_ms``. A mail id whose entry (booking or
    admission) is reached is judged against the slot it holds (:func:`_held`): later than
    ``late_ms`` after it (< 0: never late), it is judged again now, in its recipient's booked
    order (:func:`_judged`); a booking is stored flagged :data:`BOOKED`.
    """
    hi = now_ms if now_hi is None else now_hi
    if tag:
        named = tag & TAG_BITS
        for i, existing in enumerate(tags):
            if existing & TAG_BITS == named:
                return _held(ts, tags, i, now_ms, hi, spec, max_wait_ms, late_ms)
    t, tier = earliest(ts, now_ms, spec, hi, not_before_ms)
    named = tag & TAG_BITS
    if t == now_ms:
        ts.append(hi)
        tags.append(named)
        return (1, 0, now_ms, 0, 0, *remaining(ts, now_ms, spec))
    if 0 < t - now_ms <= max_wait_ms:
        ts.append(t)
        tags.append(named | BOOKED if tag else 0)  # a booking without a mail id counts as sent
        return (0, 1, t, t - now_ms, tier, *remaining(ts, t, spec))
    return (0, 0, t, t - now_ms, tier, *remaining(ts, now_ms, spec))


def _held(  # noqa: PLR0917 - the positional hot path of acquire
    ts: list[int],
    tags: list[int],
    i: int,
    now_ms: int,
    hi: int,
    spec: TierSpec,
    max_wait_ms: int,
    late_ms: int,
) -> RawDecision:
    """The answer for a mail id that holds entry ``i``: booked (its slot is ahead), or admitted.

    Every run that reaches its entry is judged against the slot it holds, the one it was
    booked or admitted for (``late_ms`` < 0: never late). On time (at most ``late_ms`` after
    the slot), an admission asked again (a copy of a run that died after its admission) keeps
    its slot, and a booking is admitted at its slot if it still fits among the entries
    actually *sent* (not flagged :data:`BOOKED`). Else (late, or a late mail sent next to it
    since) it is judged again now (:func:`_judged`).
    """
    at = ts[i]
    if at > hi:
        return (0, 1, at, at - now_ms, 0, *remaining(ts, at, spec))
    on_time = late_ms < 0 or now_ms - at <= late_ms
    if on_time and not tags[i] & BOOKED:  # admitted already (the same mail asking again)
        return (1, 0, at, 0, 0, *remaining(ts, now_ms, spec))
    if on_time:
        sent = [t for j, t in enumerate(ts) if j != i and not tags[j] & BOOKED]
        if all(window_max(sent, at, window) < limit for limit, window in spec.pairs):
            tags[i] &= TAG_BITS
            return (1, 0, at, 0, 0, *remaining(ts, now_ms, spec))
    return _judged(ts, tags, i, now_ms, hi, spec, max_wait_ms)


def _judged(  # noqa: PLR0917 - the positional hot path of acquire
    ts: list[int],
    tags: list[int],
    i: int,
    now_ms: int,
    hi: int,
    spec: TierSpec,
    max_wait_ms: int,
) -> RawDecision:
    """Entry ``i``'s mail judged again now, in its recipient's booked order.

    The mails of a recipient leave in the order of their bookings, each at the earliest time
    the policy allows after the one before: so the bookings reached before this one (earlier
    slots, runs not come yet: an outage, a backlog) go first. Each is placed where it would go
    (not written: its own run places it when it comes), then this mail at the earliest time
    that fits among the entries sent and those places. Admitted when that is now (no booking
    moves); else booked there, and the bookings after it (reached ones, whose runs have not
    come, and future ones) move back behind it, each only as far as the policy requires to
    keep the order (a future booking that still fits keeps its slot); or refused past
    ``max_wait_ms`` (its entry given back, nothing moved).
    """
    tag = tags[i] & TAG_BITS
    del ts[i]
    del tags[i]
    placed = [t for t, g in zip(ts, tags, strict=True) if not g & BOOKED]
    lb = now_ms
    for j in range(i):  # the bookings reached before it: their places, in order
        if tags[j] & BOOKED:
            lb = _stored(_fit(placed, lb, now_ms, hi, spec), now_ms, hi)
            insort(placed, lb)
    t = _fit(placed, lb, now_ms, hi, spec)
    if t == now_ms:
        _insert(ts, tags, hi, tag)
        return (1, 0, now_ms, 0, 0, *remaining(ts, now_ms, spec))
    tier = _binding(placed, lb, spec)
    if t - now_ms > max_wait_ms:
        return (0, 0, t, t - now_ms, tier, *remaining(ts, now_ms, spec))
    behind = [j for j in range(i, len(ts)) if tags[j] & BOOKED]
    moved = [(ts[j], tags[j]) for j in behind]
    for j in reversed(behind):
        del ts[j]
        del tags[j]
    insort(placed, t)
    _insert(ts, tags, t, tag | BOOKED)
    last = t
    for k, (slot, flagged) in enumerate(moved):  # in order, each no further than required
        if slot >= last + spec.max_window_ms:  # no window holds it and a change: the rest stay
            for kept in moved[k:]:
                _insert(ts, tags, *kept)
            break
        last = _fit(placed, max(slot, last), now_ms, hi, spec)
        insort(placed, last)
        _insert(ts, tags, last, flagged)
    return (0, 1, t, t - now_ms, tier, *remaining(ts, t, spec))


def judge(  # noqa: PLR0917 - the positional hot path of acquire
    ts: list[int],
    tags: list[int],
    i: int,
    now_ms: int,
    hi: int,
    spec: TierSpec,
    max_wait_ms: int,
) -> RawDecision:
    """Entry ``i``'s mail judged again now, in its recipient's booked order (:func:`_judged`),
    whether or not it is late: for a booking that waits behind an earlier one reached before it
    (:func:`mailer.limits.ordering.waits_behind`)."""
    return _judged(ts, tags, i, now_ms, hi, spec, max_wait_ms)


def _fit(placed: list[int], lb: int, now_ms: int, hi: int, spec: TierSpec) -> int:
    """The earliest ms ``>= lb`` at which one more entry fits every tier among the sorted
    ``placed``; ``now_ms`` (stored at ``hi``) only when it fits seen from both."""
    x = _fit_from(placed, lb, spec)
    if x == now_ms and hi != now_ms:
        after = _fit_from(placed, hi, spec)
        if after != hi:
            return after
    return x


def _fit_from(placed: list[int], x: int, spec: TierSpec) -> int:
    """The earliest ms ``>= x`` that every tier's :func:`earliest_insert` accepts."""
    while True:
        y = x
        for limit, window in spec.pairs:
            y = earliest_insert(placed, limit, window, y)
        if y == x:
            return x
        x = y


def _stored(t: int, now_ms: int, hi: int) -> int:
    """Where an entry placed at ``t`` is stored: an admission now at ``hi`` (never early)."""
    return hi if t == now_ms else t


def _binding(placed: list[int], lb: int, spec: TierSpec) -> int:
    """The 1-based tier whose own wait from ``lb`` among ``placed`` is longest (0: none)."""
    best, tier = lb, 0
    for index, (limit, window) in enumerate(spec.pairs, start=1):
        x = earliest_insert(placed, limit, window, lb)
        if x > best:
            best, tier = x, index
    return tier


def _insert(ts: list[int], tags: list[int], at: int, tag: int) -> None:
    """Insert entry ``(at, tag)`` in time order (after the entries at the same ms)."""
    index = bisect_right(ts, at)
    ts.insert(index, at)
    tags.insert(index, tag)


def peek(ts: list[int], now_ms: int, spec: TierSpec, now_hi: int | None = None) -> RawDecision:
    """Answer as :func:`acquire` would for a fresh attempt, without recording anything."""
    t, tier = earliest(ts, now_ms, spec, now_hi)
    if t == now_ms:
        return (1, 0, now_ms, 0, 0, *remaining(ts, now_ms, spec))
    return (0, 0, t, t - now_ms, tier, *remaining(ts, now_ms, spec))


def release(ts: list[int], tags: list[int], tag: int) -> bool:
    """Remove, in place, the entry tagged ``tag``; return whether there was one."""
    named = tag & TAG_BITS
    for i, existing in enumerate(tags):
        if existing & TAG_BITS == named:
            del ts[i]
            del tags[i]
            return True
    return False
