"""A shared scope's sliding log (domain, sender, tenant): booked times only, and hints that let a
decision start where a mail can fit, so its cost does not grow with the backlog.

A shared log needs no tags: the recipient's log keeps each mail's tag and slot, so a release
knows the slot, and gives back one entry at that time (entries are a multiset of times in ms).

**Hints.** Whether a booking at ``x`` ms keeps tier ``(L, W)`` of a shared log seen with limit
``l`` (its kind's share) depends on the log's entries only (:func:`~mailer.limits.insertion.
earliest_insert`; a mail admitted *now* is judged apart, by :func:`~mailer.limits.insertion.
fits_now`). Bookings only add entries, so a time at which nothing fits stays so until a
release. A search from ``t`` that answered ``x`` therefore learns "nothing fits in ``[t, x)``"
for that view; the log keeps it per ``(tier, l)`` as ``(lo, h)`` and the next search from a
``t`` in ``[lo, h)`` starts at ``h``. A release at ``s`` can only open room for ``x`` in ``(s -
W, s + W)``: the hints of that tier end at ``s - W + 1`` at the latest. Under a newsletter
(bookings at the end of a backlog) each search then looks at the few entries around the end,
whatever the backlog's length: ``O(L)`` entries and, on Redis, ``O(log n)`` per read.

``mailer/limits/stores/lua/scoped.lua`` mirrors these functions over a sorted set of ms slots
with a count each (``<base>:z``) and a hash (``<base>:h``: the number of entries and the
hints): evenly paced bookings share slots (``14/1s``: up to 14 a slot), a few bytes each.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from mailer.limits.insertion import earliest_insert

#: Per view of a sliding tier, ``(tier index, limit)``: ``(lo, h)``, no booking fits in ms
#: ``[lo, h)``.
Hints = dict[tuple[int, int], tuple[int, int]]


def earliest_hinted(  # noqa: PLR0917 - one view of one log
    ts: list[int], limit: int, window_ms: int, t: int, hints: Hints, key: tuple[int, int]
) -> int:
    """:func:`~mailer.limits.insertion.earliest_insert` from ``t``, started at the hint's end
    when ``t`` lies in it; what the search learns is kept in ``hints[key]``."""
    hint = hints.get(key)
    start = hint[1] if hint is not None and hint[0] <= t < hint[1] else t
    x = earliest_insert(ts, limit, window_ms, start)
    if x > t:
        if hint is not None and t <= hint[1] and x >= hint[0]:
            hints[key] = (min(hint[0], t), max(hint[1], x))
        else:
            hints[key] = (t, x)
    return x


def add(ts: list[int], x: int) -> None:
    """Book one entry at ``x`` ms."""
    insort(ts, x)


def remove(ts: list[int], hints: Hints, windows: list[int], at: int) -> bool:
    """Give back one entry at ``at`` ms (whether there was one) and end each hint of tier ``i``
    (window ``windows[i]`` ms) at ``at - W + 1`` at the latest: room may open from there."""
    j = bisect_left(ts, at)
    if j == len(ts) or ts[j] != at:
        return False
    del ts[j]
    for key, (lo, h) in list(hints.items()):
        end = min(h, at - windows[key[0]] + 1)
        if end <= lo:
            del hints[key]
        elif end != h:
            hints[key] = (lo, end)
    return True
