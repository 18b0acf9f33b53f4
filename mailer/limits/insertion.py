"""Sliding tiers of the shared scopes: a mail may be *inserted* before bookings already made.

In the recipient's log mails keep their order (each is appended after the last). A shared scope
(domain, sender, tenant) has no per-subject order to keep, so a mail there takes the earliest
time ``x`` at which inserting it keeps the tier, even before bookings other mails made: a code
mail with share 1.0 goes at once although bulk mails with share 0.5 booked the next hour (they
fill at most half of every window, so the other half stays free).

Inserting ``x`` into a sorted log keeps tier ``(L, W)`` (times in ms) iff no window of ``W`` ms
holding ``x`` already holds ``L`` entries, that is iff no ``L`` consecutive entries ``e_j ..
e_{j+L-1}`` span less than ``W`` together with ``x``. Such a group forbids exactly the ms in
``[e_{j+L-1} - W + 1, e_j + W - 1]`` (when ``e_{j+L-1} - e_j < W``); both ends grow with ``j``,
so one pass from the first group that can hold ``x`` finds the earliest allowed ``x``, and
feasibility only returns at some ``e_j + W``. ``mailer/limits/stores/lua/scoped.lua`` mirrors both
functions; ``tests/limits/scoped_model.py`` counts windows instead.

Do not use it for a scope whose mails must keep their order (the recipient's): a later mail
would overtake an earlier one's booking.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from functools import partial


def earliest_insert(ts: list[int], limit: int, window_ms: int, t: int) -> int:
    """The earliest ms ``>= t`` at which one more entry fits in the sorted log ``ts``."""
    x = t
    n = len(ts)
    # Groups whose forbidden range ends before x cannot hold it: start at the first that can.
    for j in range(bisect_left(ts, x - window_ms + 1), n - limit + 1):
        last = ts[j + limit - 1]
        if last - window_ms + 1 > x:
            break  # this group's range and every later one's start after x
        if last - ts[j] < window_ms and x <= ts[j] + window_ms - 1:
            x = ts[j] + window_ms
    return x


def fits_now(ts: list[int], limit: int, window_ms: int, now: int, hi: int) -> bool:
    """Whether one more entry fits at ``now`` seen from now (ms, rounded down): entries stored
    at ``hi`` (now rounded up) count as ``now``, they may be admissions of this same ms. Looks
    only at the entries of the windows holding ``now``."""
    n = len(ts)
    j = bisect_left(ts, now - window_ms + 1)
    while j + limit - 1 < n:
        first, last = ts[j], ts[j + limit - 1]
        first, last = now if first == hi else first, now if last == hi else last
        if last - window_ms + 1 > now:
            return True
        if last - first < window_ms and now <= first + window_ms - 1:
            return False
        j += 1
    return True


def earliest_insert_now(
    ts: list[int],
    limit: int,
    window_ms: int,
    t: int,
    *,
    now: int,
    hi: int,
    search: Callable[[int], int] | None = None,
) -> int:
    """:func:`earliest_insert`, where ``x == now`` must fit as a mail admitted now really is.

    ``now`` is the current time rounded down and ``hi`` rounded up (ms). A mail admitted now
    is stored at ``hi`` but really goes between the two, so it must fit seen from ``now``
    (entries stored at ``hi`` count as ``now``: they may be admissions of this same ms) and
    from ``hi`` (bookings after it). When it does not, the answer is the earliest ms from
    ``hi`` on. Never early, by a microsecond, whatever side of it the entries are.
    ``search(t)``: the plain search (default :func:`earliest_insert` on ``ts``), e.g. one that
    keeps hints (:mod:`mailer.limits.shared_log`).
    """
    if search is None:
        search = partial(earliest_insert, ts, limit, window_ms)
    if t != now or hi == now:
        return search(t)
    after = search(hi)
    if after == hi and fits_now(ts, limit, window_ms, now, hi):
        return now
    return after


def window_max(ts: list[int], at: int, window_ms: int) -> int:
    """The most entries of the sorted log ``ts`` in one window of ``W`` ms that holds ``at``."""
    low, high = bisect_left(ts, at - window_ms + 1), bisect_right(ts, at + window_ms - 1)
    near = ts[low:high]
    # The best window holding ``at`` can start at ``at`` or at one of its entries before it.
    best = len(near) - bisect_left(near, at)
    for i, start in enumerate(near):
        if start > at:
            break
        best = max(best, bisect_right(near, start + window_ms - 1) - i)
    return best
