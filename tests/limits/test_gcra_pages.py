"""The paged gcra search of :mod:`mailer.limits.gcra_pages` against the linear reference of
:mod:`mailer.limits.gcra_log`: the same earliest slot, room, expiry, folds and releases, to
the µs, on random logs cut in tiny pages and groups (so every level is skipped and read)."""

from __future__ import annotations

import copy
from bisect import bisect_right
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from mailer.limits import gcra_pages, gcra_search
from mailer.limits.gcra_log import (
    GcraLog,
    earliest,
    expires_us,
    fold,
    give_back,
    insert,
    share_floor,
    used,
)
from mailer.limits.gcra_pages import NONE, Pages

NOW_US = 1_700_000_000_000_123
NOW = NOW_US // 1000


@dataclass
class ListLog:
    """The reference: a linear log, its bookings in plain lists (searched one by one)."""

    floor: int = 0
    times: list[int] = field(default_factory=list)
    tags: list[int] = field(default_factory=list)
    last: int = 0

    def fold(self, now_us: int, interval: int) -> None:
        floor, last, cut = self.floor, self.last, 0
        for e, tag in zip(self.times, self.tags, strict=True):
            if e > now_us:
                break
            last = tag if floor <= e else 0
            floor = max(floor, e) + interval
            cut += 1
        del self.times[:cut], self.tags[:cut]
        self.floor, self.last = (floor, last) if floor > now_us else (0, 0)

    def insert(self, x_us: int, tag: int, now_us: int, interval: int) -> None:
        if x_us <= now_us:
            self.last = tag if self.floor <= x_us else 0
            self.floor = max(self.floor, x_us) + interval
            return
        at = bisect_right(self.times, x_us)
        self.times.insert(at, x_us)
        self.tags.insert(at, tag)

    def give_back(self, tag: int, at: int, interval: int) -> None:
        for j in range(len(self.times) - 1, -1, -1):
            if self.tags[j] == tag and -(-self.times[j] // 1000) == at:
                del self.times[j], self.tags[j]
                return
        if tag and self.last == tag and -(-(self.floor - interval) // 1000) == at:
            self.floor, self.last = 0, 0

    def expires(self, interval: int) -> int:
        tat = self.floor
        for e in self.times:
            tat = max(tat, e) + interval
        return tat


def _paged(ref: ListLog, page: int, group: int) -> GcraLog:
    log = GcraLog(floor=ref.floor, times=Pages(page, group), last=ref.last)
    for e, tag in zip(ref.times, ref.tags, strict=True):
        log.times.add(e, tag)
    return log


def _same(log: GcraLog, ref: ListLog) -> None:
    assert (log.floor, log.last, len(log.times)) == (ref.floor, ref.last, len(ref.times))
    assert list(log.times.entries()) == list(zip(ref.times, ref.tags, strict=True))


def _same_summaries(pages: Pages, intervals: tuple[int, ...]) -> None:
    """Every summary kept (carried by appends, or computed) is the one computed afresh."""
    fresh = copy.deepcopy(pages)
    fresh.forget()
    for interval in intervals:
        assert pages.group_edges(interval) == fresh.group_edges(interval)
    for group, again in zip(pages.groups, fresh.groups, strict=True):
        assert group.count == sum(len(p.times) for p in group.pages) > 0
        for interval in intervals:
            assert group.page_edges(interval) == again.page_edges(interval)
        for run, new in [*zip(group.pages, again.pages, strict=True), (group, again)]:
            assert {i: new.fold(i) for i in run.folds} == run.folds
            assert {k: new.theta(*k) for k in run.thetas} == run.thetas


def _check_group_runs(pages: Pages, interval: int, c: int) -> None:
    """The run of groups a search jumps (``_View.kept_from``) is the run each group's own
    summary proves closed or over-full, from floors at and around each group's thresholds."""
    if not pages:
        return
    us, _ = pages.thresholds(interval, c)
    a, _, g = pages.groups[-1].fold(interval)
    common = c + 1 - max(NONE + a, g) - pages.group_edges(interval)[0][-1]
    for floor in {f + d for f in [0, common, *us] if abs(f) < 1 << 60 for d in (-1, 0, 1)}:
        view = gcra_search._View(pages, floor, interval, c)
        for start in range(len(pages.groups)):
            want = start
            while want < len(pages.groups) - 1:
                tau, right = view.at_group(want)
                group = pages.groups[want]
                if tau < group.theta(interval, c) and tau + right + group.fold(interval)[0] <= c:
                    break
                want += 1
            assert view.kept_from(start) == want


def _check_searches(log: GcraLog, ref: ListLog, view: tuple[int, int], now_us: int) -> None:
    """Every start from now to past the last booking, and room at every booking's edges."""
    limit, interval = view
    now = now_us // 1000
    last = -(-ref.times[-1] // 1000) if ref.times else now
    for t in [now, *range(now + 1, last + 3, max(1, (last - now) // 40))]:
        want = earliest(ref.floor, ref.times, limit, interval, t, now=now, now_us=now_us)
        got = earliest(log.floor, log.times, limit, interval, t, now=now, now_us=now_us)
        assert got == want, (t, view)
    view_ = gcra_search._View(log.times, log.floor, interval, (limit - 1) * interval)
    for gi, group in enumerate(log.times.groups):  # a group is skipped iff all its pages are
        tau, right = view_.at_group(gi)
        fold_ = group.fold(interval)
        whole = tau >= group.theta(interval, view_.c) or tau + right + fold_[0] > view_.c
        pages = all(view_.skips_page(gi, pi) for pi in range(len(group.pages)))
        assert view_.skips_group(gi) == (whole or pages)
    _check_group_runs(log.times, interval, (limit - 1) * interval)
    for at in {now_us, *(e + d for e in ref.times[::3] for d in (-1, 0, 1))}:
        assert used(log.floor, log.times, interval, at) == used(ref.floor, ref.times, interval, at)
    assert expires_us(log, interval) == ref.expires(interval)


VIEWS = st.sampled_from([(1, 1000), (3, 999), (2, 2500), (5, 1001), (7, 142_858), (4, 1)])


@settings(max_examples=300, deadline=None)
@given(
    view=VIEWS,
    floor=st.one_of(st.just(0), st.integers(NOW_US, NOW_US + 20_000)),
    offsets=st.lists(st.integers(1, 30_000), max_size=40),
    misaligned=st.booleans(),
    sizes=st.tuples(st.integers(1, 4), st.integers(1, 3)),
)
def test_the_paged_search_answers_as_the_linear_one(
    view: tuple[int, int],
    floor: int,
    offsets: list[int],
    misaligned: bool,
    sizes: tuple[int, int],
) -> None:
    """Random logs (ms slots or µs ones), tiny pages and groups: earliest (admission now
    included), room and expiry as the linear search gives them."""
    times = sorted(NOW_US + o if misaligned else (NOW + 1 + o // 1000) * 1000 for o in offsets)
    ref = ListLog(floor, times, list(range(1, len(times) + 1)))
    log = _paged(ref, *sizes)
    _same(log, ref)
    _check_searches(log, ref, view, NOW_US)


@settings(max_examples=200, deadline=None)
@given(
    view=VIEWS,
    share=st.sampled_from([None, (1, 2), (2, 5)]),
    ops=st.lists(
        st.tuples(st.sampled_from("bbbbxxarf"), st.integers(0, 40_000), st.integers(1, 30)),
        max_size=60,
    ),
    sizes=st.tuples(st.integers(1, 4), st.integers(1, 3)),
)
def test_bookings_releases_and_folds_keep_the_same_answers(
    view: tuple[int, int],
    share: tuple[int, int] | None,
    ops: list[tuple[str, int, int]],
    sizes: tuple[int, int],
) -> None:
    """A trace of bookings (at the earliest slot, as the stores book, or anywhere), admissions,
    releases and folds as now moves on: the paged log keeps the linear log's content, and
    the full view's and a share's view's answers stay the linear ones at every step."""
    limit, interval = view
    part = interval if share is None else -(-interval * share[1] // share[0])
    ref, log = ListLog(), GcraLog(times=Pages(*sizes))
    now_us = NOW_US
    for n, (op, arg, tag) in enumerate(ops, 1):
        now = now_us // 1000
        if op == "b":  # a booking at the earliest slot from now + arg µs (rounded to a ms)
            t = now + 1 + arg // 1000
            x = earliest(ref.floor, ref.times, limit, interval, t, now=now, now_us=now_us)
            assert earliest(log.floor, log.times, limit, interval, t, now=now, now_us=now_us) == x
            assert expires_us(log, interval) == ref.expires(interval)
            ref.insert(x * 1000, n, now_us, interval)
            insert(log, x * 1000, n, now_us, interval)
        elif op == "x":  # a booking anywhere after now (the structure holds any)
            ref.insert(now_us + 1 + arg, n, now_us, interval)
            insert(log, now_us + 1 + arg, n, now_us, interval)
        elif op == "a":  # an admission now
            ref.insert(now_us, n, now_us, interval)
            insert(log, now_us, n, now_us, interval)
        elif op == "r" and ref.times:  # a release of a listed booking (or a miss)
            j = arg % len(ref.times)
            at, who = -(-ref.times[j] // 1000), ref.tags[j] if tag % 5 else tag
            ref.give_back(who, at, interval)
            give_back(log, who, at, interval)
        elif op == "f":  # now moves on and the past is folded
            now_us += arg
            ref.fold(now_us, interval)
            fold(log, now_us, interval)
        _same(log, ref)
        _same_summaries(log.times, (interval, part))
    _check_searches(log, ref, view, now_us)
    if share is not None:  # a share's view of the same bookings from its own base
        lim = max(1, limit * share[0] // share[1])
        base = share_floor(ref.floor, now_us, interval, part)
        _check_searches(GcraLog(base, log.times), ListLog(base, ref.times), (lim, part), now_us)


def test_a_newsletter_appended_at_the_end_keeps_full_pages() -> None:
    """Bookings made one by one after the last one fill their pages and groups (a new one
    starts where the last is full): n / PAGE pages."""
    log = GcraLog()
    limit, interval = 7, -(-1_000_000 // 7)
    for i in range(5_000):
        insert(log, NOW_US + 1 + i * interval, i + 1, NOW_US, interval)
    pages = [len(p.times) for g in log.times.groups for p in g.pages]
    assert sum(pages) == 5_000
    assert len(pages) == -(-5_000 // gcra_pages.PAGE)
    assert len(log.times.groups) == -(-len(pages) // gcra_pages.GROUP)
    x = earliest(log.floor, log.times, limit, interval, NOW, now=NOW, now_us=NOW_US)
    ref = list(log.times)
    assert x == earliest(log.floor, ref, limit, interval, NOW, now=NOW, now_us=NOW_US)


def test_a_run_exactly_at_the_limit_is_read() -> None:
    """A run whose arrival time in, bound after and length add up to ``c`` exactly may hold a
    slot (only beyond ``c`` is every gap over-full): 3 per 3 ms, bookings at +2, +4, +5, +5,
    +6 ms, a mail from +4 ms goes at +4 ms however the bookings are cut."""
    times = [(NOW + d) * 1000 for d in (2, 4, 5, 5, 6)]
    for page in (1, 2, 3):
        for group in (1, 2):
            pages = Pages(page, group)
            for tag, e in enumerate(times, 1):
                pages.add(e, tag)
            for t in range(NOW, NOW + 10):
                want = earliest(0, times, 3, 1000, t, now=NOW, now_us=NOW * 1000)
                assert earliest(0, pages, 3, 1000, t, now=NOW, now_us=NOW * 1000) == want
            assert earliest(0, pages, 3, 1000, NOW + 4, now=NOW, now_us=NOW * 1000) == NOW + 4


def _flat(runs: list[list[int]]) -> list[int]:
    return [e for run in runs for e in run]


def _fold_from(start: int, times: list[int], interval: int) -> int:
    for e in times:
        start = max(start, e) + interval
    return start


def _bound_from(start: int, times: list[int], interval: int) -> int:
    for e in reversed(times):
        start = max(start + interval, interval - e)
    return start


@settings(max_examples=300, deadline=None)
@given(
    view=VIEWS,
    offsets=st.lists(st.integers(1, 30_000), min_size=2, max_size=30),
    misaligned=st.booleans(),
    page=st.integers(1, 4),
    picks=st.lists(st.tuples(st.integers(0, 99), st.integers(0, 99)), min_size=1, max_size=12),
)
def test_a_group_is_skipped_exactly_when_each_of_its_pages_is(
    view: tuple[int, int],
    offsets: list[int],
    misaligned: bool,
    page: int,
    picks: list[tuple[int, int]],
) -> None:
    """The sorted thresholds a group keeps (``_Group.skipped``) say what checking every page
    but the last one by one says, at and around each page's thresholds (µs edges)."""
    limit, interval = view
    c = (limit - 1) * interval
    times = sorted(NOW_US + o if misaligned else (NOW + 1 + o // 1000) * 1000 for o in offsets)
    pages = Pages(page, 1_000)
    for tag, e in enumerate(times, 1):
        pages.add(e, tag)
    (group,) = pages.groups
    runs = [run.times for run in group.pages]
    taus, rights = [NOW_US], [-NOW_US]
    for p, run in enumerate(group.pages[:-1]):  # each page's thresholds, from its emissions
        before, after = _flat(runs[:p]), _flat(runs[p + 1 : -1])
        a = len(run.times) * interval
        big_b, big_g = _fold_from(NONE, before, interval), _bound_from(NONE, after, interval)
        taus += [run.theta(interval, c) - len(before) * interval]
        taus += [c + 1 - len(before) * interval - big_g - a]
        rights += [c + 1 - big_b - len(after) * interval - a, c + 1 - len(times) * interval]
    taus = [t + d for t in taus for d in (-1, 0, 1) if abs(t) < 1 << 60]
    rights = [r + d for r in rights for d in (-1, 0, 1) if abs(r) < 1 << 60]
    for i, j in picks:
        tau, right = taus[i % len(taus)], rights[j % len(rights)]
        if j % 2:
            right = c + 1 - len(_flat(runs[:-1])) * interval - tau + j % 3 - 1
        each = []
        for p, run in enumerate(group.pages[:-1]):
            tat = _fold_from(tau, _flat(runs[:p]), interval)
            bound = _bound_from(right, _flat(runs[p + 1 : -1]), interval)
            each.append(
                tat >= run.theta(interval, c) or tat + bound + len(run.times) * interval > c
            )
        assert group.skipped(interval, c, tau, right) == all(each)


def test_a_pages_gaps_are_kept_under_the_bounds_they_were_entered_with() -> None:
    """``Pages.gaps`` keeps the last page's gaps by the arrival time and bound it was entered
    with: entered again with another bound (here the one its first gap had), it walks again
    and gives that bound's gaps, not the kept ones."""
    interval = -(-1_000_000 // 14)
    pages = Pages(8, 4)
    for i in range(6):
        pages.add(NOW_US + 1 + i * 2 * interval, i + 1)
    page = pages.groups[0].pages[0]
    tau, right = NOW_US, NONE
    tats, rights = pages.gaps(page, interval, tau, right)
    assert pages.gaps(page, interval, tau, right) == (tats, rights)
    other = rights[0]
    fresh = copy.deepcopy(pages)
    assert pages.gaps(page, interval, tau, other) == fresh.gaps(
        fresh.groups[0].pages[0], interval, tau, other
    )
    assert pages.gaps(page, interval, tau, other)[1][-1] == other


@settings(max_examples=200, deadline=None)
@given(
    offsets=st.lists(st.integers(1, 30_000), min_size=1, max_size=40),
    sizes=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    interval=st.sampled_from([1, 999, 1000, 71_429]),
)
def test_a_groups_fold_is_the_fold_of_its_emissions(
    offsets: list[int], sizes: tuple[int, int], interval: int
) -> None:
    """Bookings added in any order (pages changed in the middle of their group, cut in two):
    after each, every group's fold, composed from its pages' maps, is the one its emissions
    give one by one."""
    pages = Pages(*sizes)
    for tag, offset in enumerate(offsets, 1):
        pages.add(NOW_US + offset, tag)
        for group in pages.groups:
            flat = _flat([page.times for page in group.pages])
            want = [len(flat) * interval, _fold_from(NONE, flat, interval)]
            assert group.fold(interval) == [*want, _bound_from(NONE, flat, interval)]


def test_a_release_reopens_what_the_last_search_found_closed() -> None:
    """A search starts where the same view's last one found nothing fits (kept while bookings
    are only added); a booking taken out drops that, so the slot it freed is found again."""
    limit, interval = 2, 1000
    ref, log = ListLog(), GcraLog(times=Pages(2, 2))
    for tag in range(1, 9):  # 2 per 2 ms, each at the earliest slot from now + 1 ms
        x = earliest(log.floor, log.times, limit, interval, NOW + 1, now=NOW, now_us=NOW_US)
        assert x == earliest(ref.floor, ref.times, limit, interval, NOW + 1, now=NOW, now_us=NOW_US)
        ref.insert(x * 1000, tag, NOW_US, interval)
        insert(log, x * 1000, tag, NOW_US, interval)
    assert log.times.closed  # the next search starts past the first slots
    first = ref.times[0] // 1000
    ref.give_back(1, first, interval)
    give_back(log, 1, first, interval)
    assert not log.times.closed
    x = earliest(log.floor, log.times, limit, interval, NOW + 1, now=NOW, now_us=NOW_US)
    assert x == earliest(ref.floor, ref.times, limit, interval, NOW + 1, now=NOW, now_us=NOW_US)
    assert x == first
