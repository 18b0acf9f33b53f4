"""GCRA tiers that take a mail by insertion: a bucket floor plus the emissions booked ahead.

A GCRA tier ``L/W`` (emission interval ``T = ceil(W/L)`` µs) holds for a sorted sequence of
emissions iff every span ``[a, b]`` of it holds at most ``L + (b - a)/T`` of them. A bucket
with one theoretical arrival time (``tat``) can only append: a bulk mail booked an hour ahead
moves ``tat`` an hour ahead, and a code mail after it must wait that hour. So a gcra tier keeps

- ``floor``: the ``tat`` of every emission up to now (µs; 0: none), which is exactly what the
  spans starting then ask of what comes after (:func:`fold`), and
- the emissions after now (bookings), sorted, with their tags,

and a mail takes the earliest ms at which inserting it keeps every span holding it (one pass:
:func:`earliest`). Without bookings the list is empty and the tier is the one timestamp of
redis-cell's GCRA.

Shares. A kind with share ``s < 1`` must also keep the tier seen as a bucket of ``L_s =
max(1, floor(s·L))`` refilled at ``L_s`` per ``W`` (interval ``T_s = ceil(W/L_s)``): the
tokens the past still holds in the full bucket (rounded up) count in it token for token
(:func:`share_floor`), and the emissions booked after now as they are. Bulk mails fill at most
``s`` of the burst and of the rate they book ahead, so a code mail finds the rest free, as in
a sliding tier. The full tier is always kept (never over).

A :class:`GcraLog` keeps its bookings in pages in groups with summaries
(:class:`~mailer.limits.gcra_pages.Pages`), and :func:`earliest` and :func:`used` given them
run the paged search (:mod:`mailer.limits.gcra_search`): it jumps the runs of groups, skips
the groups and pages whose summaries prove that nothing fits there, and reads one or two pages
of at most 32 bookings. A booking after the last one carries the summaries one step; one
elsewhere costs its page and group (O(PAGE + GROUP)) and the groups' maps only as far as a
search asks (``make bench`` prints the time per decision at 100 000 bookings against 10 in
each booking order of ``benchmarks/limiter.py``).
Given a plain sorted list they run the linear search here, O(n): the reference
(``tests/limits/test_gcra_pages.py`` checks that both give the same answers, to the µs). The Redis
store keeps the same pages in its own form (docs/explanation/limiter.md, "Long gcra
backlogs"). With nothing booked a tier is the one timestamp.

For one insertion point ``x`` with ``k`` emissions at or before it, the spans holding ``x``
keep the tier iff ``tat_k - x <= c``, ``R_k + x <= c`` and ``tat_k + R_k <= c``, where ``c =
(L-1)·T``, ``tat_k`` is the bucket's arrival time after the first ``k`` emissions (from the
floor) and ``R_k = max over j > k of ((j-k)·T - e_j)`` (the spans ending after ``x``).
``mailer/limits/stores/lua/scoped.lua`` mirrors these functions;
``tests/limits/scoped_model.py`` counts spans instead.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

from mailer.limits import gcra_search
from mailer.limits.gcra_pages import Pages

#: Below any time: ``R_k`` when no emission follows.
_NONE = -(1 << 80)
#: How far ahead (µs) a share's floor may reach: beyond, never (exact in Lua's doubles too).
_FAR = 1 << 52


@dataclass
class GcraLog:
    """One gcra tier of one scope key: the floor (µs, 0: none) and the emissions after now.

    ``last``: the tag of the last emission folded into the floor when the bucket had caught up
    with it (floor = its time + one interval), so that it alone made the floor and can be
    given back; else 0.
    """

    floor: int = 0
    times: Pages = field(default_factory=Pages)  # the bookings: µs, sorted, with their tags
    last: int = 0


def interval_us(limit: int, window_ms: int) -> int:
    """The emission interval of ``limit`` per ``window_ms``, in µs, rounded up."""
    return -(-window_ms * 1000 // limit)


def fold(log: GcraLog, now_us: int, interval: int) -> None:
    """Move the emissions up to ``now_us`` into the floor (only the last can be given back)."""
    floor, last = log.floor, log.last
    for e, tag in log.times.pop_until(now_us):
        last = tag if floor <= e else 0
        floor = max(floor, e) + interval
    log.floor, log.last = (floor, last) if floor > now_us else (0, 0)


def share_floor(floor: int, now_us: int, interval: int, part: int) -> int:
    """The floor a kind with a share sees (µs, 0: none): the tokens the bucket's past still
    holds at ``now_us`` (whole intervals, rounded up), each held for the share's ``part``."""
    if floor <= now_us:
        return 0
    tokens = -(-(floor - now_us) // interval)
    return now_us + min(tokens * part, _FAR)


def _bounds(floor: int, times: Sequence[int], interval: int) -> tuple[list[int], list[int]]:
    """``tat_k`` and ``R_k`` for k = 0 .. len(times) (see the module's docstring)."""
    tats = [floor]
    for e in times:
        tats.append(max(tats[-1], e) + interval)
    rights = [_NONE] * (len(times) + 1)
    for k in range(len(times) - 1, -1, -1):
        rights[k] = max(interval - times[k], rights[k + 1] + interval)
    return tats, rights


def earliest(
    floor: int,
    times: Sequence[int] | Pages,
    limit: int,
    interval: int,
    t: int,
    *,
    now: int,
    now_us: int,
) -> int:
    """The earliest ms ``>= t`` at which one more emission keeps the tier ``(limit, interval)``.

    ``x == now`` (ms, rounded down) means an admission at ``now_us`` exactly; any later ``x``
    a booking at ``x`` ms. Over :class:`Pages` the paged search, over a list the linear one.
    """
    if isinstance(times, Pages):
        return gcra_search.earliest(times, floor, limit, interval, t, now, now_us)
    c = (limit - 1) * interval
    tats, rights = _bounds(floor, times, interval)
    if t == now:
        k = bisect_right(times, now_us)
        tat, right = tats[k], rights[k]
        if tat - now_us <= c and right + now_us <= c and tat + right <= c:
            return now
        t = now + 1
    x = t
    k = bisect_right(times, x * 1000)
    while True:
        tat, right = tats[k], rights[k]
        if tat + right <= c:
            x = max(x, -(-(tat - c) // 1000))
            if (k == len(times) or x * 1000 < times[k]) and right + x * 1000 <= c:
                return x
        x = max(x, -(-times[k] // 1000))  # the next gap, from its first emission on
        k = bisect_right(times, x * 1000)


def used(floor: int, times: Sequence[int] | Pages, interval: int, at_us: int) -> int:
    """How many emissions the spans holding ``at_us`` already use, in whole intervals (over
    :class:`Pages` from their summaries, over a list linearly)."""
    if isinstance(times, Pages):
        return gcra_search.used(times, floor, interval, at_us)
    tats, rights = _bounds(floor, times, interval)
    k = bisect_right(times, at_us)
    ahead = max(0, tats[k] - at_us) + max(0, rights[k] + at_us)
    return -(-ahead // interval)


def insert(log: GcraLog, x_us: int, tag: int, now_us: int, interval: int) -> None:
    """Record one emission at ``x_us`` (µs) for the mail tagged ``tag``: an admission (at or
    before ``now_us``) goes into the floor at once, a booking into the list."""
    if x_us <= now_us:
        log.last = tag if log.floor <= x_us else 0
        log.floor = max(log.floor, x_us) + interval
        return
    log.times.add(x_us, tag)


def give_back(log: GcraLog, tag: int, at: int, interval: int) -> None:
    """Take back the emission of the mail tagged ``tag`` whose slot is ``at`` (ms): listed, or
    the floor's last when it alone made the floor (the bucket is then full: floor 0)."""
    if log.times.remove(tag, at):
        return
    if tag and log.last == tag and -(-(log.floor - interval) // 1000) == at:
        log.floor, log.last = 0, 0


def expires_us(log: GcraLog, interval: int) -> int:
    """When the tier holds nothing any more (µs): the bucket is full again from then on."""
    return log.times.tat(log.floor, interval)
