"""The paged gcra search of docs/explanation/limiter.md ("Long gcra backlogs"), a reference in
Python: a gcra view's emissions cut in pages, each page summarised for the view by four
numbers, give the same earliest slot as :func:`mailer.limits.gcra_log.earliest` while reading
only the pages the search cannot skip.

The Redis store runs this search over pages in groups (``stores/lua/scoped.lua``), the memory
store over :mod:`mailer.limits.gcra_pages` (checked by ``tests/limits/test_gcra_pages.py``); this
file pins the arithmetic against the linear search of :mod:`mailer.limits.gcra_log`: the
summaries of two pages compose to the summary of both (so a tree of pages works), and the
paged search agrees with the linear one on random logs, µs edges and a tight backlog, where it
reads no page.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from mailer.limits.gcra_log import GcraLog, earliest, fold, insert, share_floor

#: Below any time (no emission follows / no bound).
NONE = -(1 << 80)


@dataclass(frozen=True)
class Summary:
    """One page (or run of pages) of a gcra view ``(T, c)``, µs.

    ``a``, ``b``: the page maps the arrival time before it ``tau`` to ``max(tau + a, b)``;
    ``g``, ``a``: the bound ``R`` after it to ``max(R + a, g)`` before it; ``theta``: every gap
    that ends at one of its emissions admits nothing when ``tau >= theta`` (NONE: whatever
    ``tau``; a huge value: never proved).
    """

    a: int
    b: int
    g: int
    theta: int


def _closing(e: int, c: int) -> int:
    """The arrival time from which the gap ending at emission ``e`` admits no ms: the earliest
    ms the bucket allows, ``ceil((tat - c)/1000)``, is at or after ``e``'s ms."""
    return c + (-(-e // 1000) - 1) * 1000 + 1


def summarize(page: list[int], interval: int, c: int) -> Summary:
    """The page's summary for the view (interval ``T``, ``c = (L-1)·T``)."""
    b, theta, g = NONE, NONE, NONE
    for i, e in enumerate(page):
        need = _closing(e, c)
        if b < need:  # the gap before e is closed only by the arrival time coming in
            theta = max(theta, need - i * interval)
        b = max(b, e) + interval
        g = max(g, (i + 1) * interval - e)
    return Summary(len(page) * interval, b, g, theta)


def compose(first: Summary, then: Summary) -> Summary:
    """The summary of ``first`` followed by ``then`` (exact: a tree of pages may keep these)."""
    theta = first.theta if then.theta <= first.b else max(first.theta, then.theta - first.a)
    return Summary(
        first.a + then.a,
        max(first.b + then.a, then.b),
        max(then.g + first.a, first.g),
        theta,
    )


def _gap(
    pages: list[list[int]], sums: list[Summary], floor: int, at: tuple[int, int], t_: int
) -> tuple[int, int]:
    """tat and R at gap ``i`` of page ``p``, ``at = (p, i)`` (before its ``i``-th emission,
    0-based), for the view of interval ``t_``."""
    p, i = at
    tau = floor
    for s in sums[:p]:
        tau = max(tau + s.a, s.b)
    right = NONE
    for s in reversed(sums[p + 1 :]):
        right = max(right + s.a, s.g)
    if i == 0:  # the page's first gap: its summary is enough
        return tau, max(right + sums[p].a, sums[p].g)
    page = pages[p]
    tat = tau
    for e in page[:i]:
        tat = max(tat, e) + t_
    for e in reversed(page[i:]):
        right = max(right + t_, t_ - e)
    return tat, right


def earliest_paged(  # noqa: PLR0917 - the linear search's arguments, paged
    floor: int,
    pages: list[list[int]],
    limit: int,
    interval: int,
    t: int,
    now: int,
    now_us: int,
) -> tuple[int, int]:
    """:func:`earliest` over ``pages`` (the emissions cut in non-empty sorted pages), and how
    many emissions it read: a page whose summary proves every gap closed, or over-full, is
    skipped."""
    c = (limit - 1) * interval
    sums = [summarize(page, interval, c) for page in pages]
    read = 0
    times = [e for page in pages for e in page]
    n = len(times)

    def locate(k: int) -> tuple[int, int]:
        for p, page in enumerate(pages):
            if k < len(page):
                return p, k
            k -= len(page)
        return len(pages), 0

    def bounds(k: int) -> tuple[int, int]:
        nonlocal read
        p, i = locate(k)
        if p == len(pages):  # after every emission: the tat of all, nothing follows
            tau = floor
            for s in sums:
                tau = max(tau + s.a, s.b)
            return tau, NONE
        read += len(pages[p]) if i else 0
        return _gap(pages, sums, floor, (p, i), interval)

    def count_upto(us: int) -> int:
        return sum(1 for e in times if e <= us)  # the stores: a page index and one page

    if t == now:
        tat, right = bounds(count_upto(now_us))
        if tat - now_us <= c and right + now_us <= c and tat + right <= c:
            return now, read
        t = now + 1
    x = t
    k = count_upto(x * 1000)
    while True:
        p, i = locate(k)
        if p < len(pages) and i == 0:
            tau = floor
            for s in sums[:p]:
                tau = max(tau + s.a, s.b)
            right = NONE
            for s in reversed(sums[p + 1 :]):
                right = max(right + s.a, s.g)
            # every gap of page p closed, or over-full (tat_k + R_k >= tau + R after + a > c):
            # skip it unread
            if tau >= sums[p].theta or tau + right + sums[p].a > c:
                x = max(x, -(-pages[p][-1] // 1000))
                k = count_upto(x * 1000)
                continue
        tat, right = bounds(k)
        if tat + right <= c:
            x = max(x, -(-(tat - c) // 1000))
            if (k == n or x * 1000 < times[k]) and right + x * 1000 <= c:
                return x, read
        x = max(x, -(-times[k] // 1000))
        k = count_upto(x * 1000)


def _pages(times: list[int], cuts: list[int]) -> list[list[int]]:
    out, at = [], 0
    for size in cuts:
        if at >= len(times):
            break
        out.append(times[at : at + size])
        at += size
    if at < len(times):
        out.append(times[at:])
    return out


NOW_US = 1_700_000_000_000_123


@settings(max_examples=400, deadline=None)
@given(
    limit=st.integers(1, 5),
    interval=st.sampled_from([1, 999, 1000, 1001, 2500, 71_429]),
    floor=st.one_of(st.just(0), st.integers(NOW_US, NOW_US + 20_000)),
    offsets=st.lists(st.integers(1, 30_000), max_size=25),
    misaligned=st.booleans(),
    cuts=st.lists(st.integers(1, 6), max_size=10),
    start=st.integers(0, 25),
)
def test_the_paged_search_finds_what_the_linear_one_finds(  # noqa: PLR0917
    limit: int,
    interval: int,
    floor: int,
    offsets: list[int],
    misaligned: bool,
    cuts: list[int],
    start: int,
) -> None:
    """Random views, emissions (ms slots, or µs ones), page cuts and start times: the paged
    search answers what :func:`earliest` answers, admission now included."""
    now = NOW_US // 1000
    times = sorted(NOW_US + o if misaligned else (now + 1 + o // 1000) * 1000 for o in offsets)
    pages = _pages(times, cuts)
    t = now + start
    want = earliest(floor, times, limit, interval, t, now=now, now_us=NOW_US)
    got, _ = earliest_paged(floor, pages, limit, interval, t, now, NOW_US)
    assert got == want


@settings(max_examples=300, deadline=None)
@given(
    interval=st.sampled_from([1, 1000, 1001, 71_429]),
    c_mult=st.integers(0, 4),
    left=st.lists(st.integers(0, 9_000_000), min_size=1, max_size=8),
    right=st.lists(st.integers(0, 9_000_000), min_size=1, max_size=8),
    tau=st.integers(-10_000_000, 20_000_000),
)
def test_two_pages_compose_to_the_summary_of_both(
    interval: int, c_mult: int, left: list[int], right: list[int], tau: int
) -> None:
    """Summaries compose exactly (maps, bound and the closed-gaps threshold), so runs of pages
    may be summarised in a tree and skipped together."""
    c = c_mult * interval
    first, then = sorted(left), sorted(right)
    both = first + sorted(e + first[-1] for e in then)
    second = [e + first[-1] for e in sorted(right)]
    assert compose(summarize(first, interval, c), summarize(second, interval, c)) == summarize(
        both, interval, c
    )
    whole = summarize(both, interval, c)
    assert (tau >= whole.theta) == (
        tau >= summarize(first, interval, c).theta
        and max(tau + len(first) * interval, summarize(first, interval, c).b)
        >= summarize(second, interval, c).theta
    )


def test_a_tight_backlog_is_searched_in_its_last_page() -> None:
    """A newsletter's bookings made one by one (share view 7 a second of 14/1s, each at the
    earliest slot): the next one, searched from now, lands where the linear search puts it
    reading no page at all: every page is proved closed by its summary, and the slot after the
    last emission comes from the summaries too (a store keeps them in a tree: O(log n))."""
    limit, interval = 7, -(-1_000_000 // 7)
    now = NOW_US // 1000
    log = GcraLog()
    for _ in range(2_000):
        x = earliest(log.floor, log.times, limit, interval, now, now=now, now_us=NOW_US)
        insert(log, x * 1000 if x > now else NOW_US, 0, NOW_US, interval)
    times = list(log.times)
    pages = _pages(times, [256] * 8)
    want = earliest(log.floor, times, limit, interval, now, now=now, now_us=NOW_US)
    got, read = earliest_paged(log.floor, pages, limit, interval, now, now, NOW_US)
    assert (got, read) == (want, 0)
    assert want * 1000 > times[-1]
    assert earliest(log.floor, log.times, limit, interval, now, now=now, now_us=NOW_US) == want


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(1, 5),
    interval=st.sampled_from([999, 1000, 2500, 71_429]),
    floor=st.one_of(st.just(0), st.integers(NOW_US, NOW_US + 20_000)),
    offsets=st.lists(st.integers(1, 30_000), max_size=20),
    later=st.integers(0, 30_000),
    ahead=st.integers(1, 40),
)
def test_folding_keeps_the_full_views_answers(  # noqa: PLR0917
    limit: int, interval: int, floor: int, offsets: list[int], later: int, ahead: int
) -> None:
    """The full view's answers for bookings after now do not change when now moves on and the
    past is folded into the floor: a hint "nothing fits in [lo, h)" of the full view would stay
    true until a release (the design's first claim)."""
    now = NOW_US // 1000
    times = sorted((now + 1 + o // 1000) * 1000 for o in offsets)
    before, after = GcraLog(floor=floor), GcraLog(floor=floor)
    for e in times:
        before.times.add(e, 0)
        after.times.add(e, 0)
    fold(before, NOW_US, interval)
    later_us = NOW_US + later
    fold(after, later_us, interval)
    t = later_us // 1000 + ahead
    assert earliest(
        before.floor, before.times, limit, interval, t, now=now, now_us=NOW_US
    ) == earliest(
        after.floor, after.times, limit, interval, t, now=later_us // 1000, now_us=later_us
    )


def test_a_share_views_room_reopens_as_now_moves_on() -> None:
    """Why range hints fail for a share's view: its base, rebuilt from the full bucket's tokens
    at now, drops at each token's end, so a slot found at one now comes earlier one interval
    later, with nothing released (14/1s at share 0.5: the view 7/1s)."""
    full, part = -(-1_000_000 // 14), -(-1_000_000 // 7)
    floor = NOW_US + 10 * full
    slots = []
    for now_us in (NOW_US, NOW_US + full):
        base = share_floor(floor, now_us, full, part)
        slots.append(earliest(base, [], 7, part, now_us // 1000 + 1, now=0, now_us=now_us))
    assert slots[1] < slots[0]
