"""A gcra tier's bookings in pages in groups, each summarised per view, for the paged search.

The bookings (µs, sorted, with their tags) are cut in pages of at most :data:`PAGE` and the
pages in groups of at most :data:`GROUP`. For a view (interval ``T`` µs, ``c = (L-1)·T``) a
run of emissions ``e_1 .. e_m`` (a page, a group) is summarised by (docs/explanation/
limiter.md, "Long gcra backlogs: pages with summaries"):

- ``a = m·T``, ``b``: it maps the arrival time entering it ``tau`` to ``max(tau + a, b)``;
- ``g``: it maps the bound ``R`` after it to ``max(R + a, g)`` before it;
- ``theta`` (per ``c``): every gap ending at one of its emissions admits no ms when ``tau >=
  theta``.

Summaries compose, so a search from ``t`` (:mod:`mailer.limits.gcra_search`) skips every
group or page whose summary proves each gap in it closed or over-full and reads only what it
cannot skip. Kept per view until something they compose changes: the summaries, the maps
composed over the groups and over each group's pages (the last group or page left out, so
that an append keeps them), and each run's thresholds. A booking after the last one carries
the summaries one step (O(1) per view); one elsewhere, a release or a fold recompute its
page's and its group's (O(PAGE + GROUP)); the maps over the groups
(:class:`~mailer.limits.gcra_maps.GroupMaps`) and each group's thresholds are then computed
again only as far as a search asks for them (a booking near the front: O(1) groups).
:mod:`mailer.limits.gcra_log` keeps the linear search over a
plain list as the reference; ``tests/limits/test_gcra_pages.py`` checks both give the same answers.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence

from mailer.limits.gcra_maps import NONE, Edges, Fold, GroupMaps

__all__ = ["GROUP", "NONE", "PAGE", "Edges", "Fold", "Pages", "Place"]

#: The most bookings a page keeps before it is cut in two (the last one: a new page starts).
PAGE = 32
#: The most pages a group keeps before it is cut in two (the last one: a new group starts).
GROUP = 16

#: A group's pages as :meth:`_Group.skipped` sorts them: ``u`` ascending, the largest ``v``
#: from each on (one more: none), and the sum of ``a`` over every page but the last.
Stairs = tuple[list[int], list[int], int]


def _edges(folds: list[Fold]) -> Edges:
    """The :data:`Edges` of consecutive runs with these folds, the last left out."""
    folds = folds[:-1]
    big_a, big_b = [0], [NONE]
    for a, b, _ in folds:
        big_a.append(big_a[-1] + a)
        big_b.append(max(big_b[-1] + a, b))
    big_s, big_g = [0] * len(folds), [NONE] * len(folds)
    for j in range(len(folds) - 1, 0, -1):
        a, _, g = folds[j]
        big_s[j - 1] = big_s[j] + a
        big_g[j - 1] = max(big_g[j] + a, g)
    return big_a, big_b, big_s, big_g


def _closing(e: int, c: int) -> int:
    """The arrival time from which the gap ending at emission ``e`` admits no ms."""
    return c + (-(-e // 1000) - 1) * 1000 + 1


def _ceil_ms(us: int) -> int:
    return -(-us // 1000)


class _Run:
    """A page (``times``/``tags``) or a group (``pages``), with its summaries by view."""

    __slots__ = ("folds", "thetas")

    def __init__(self) -> None:
        self.folds: dict[int, Fold] = {}  # interval -> [a, b, g]
        self.thetas: dict[tuple[int, int], int] = {}  # (interval, c) -> theta

    def forget(self) -> None:
        self.folds.clear()
        self.thetas.clear()

    def carry(self, e: int, m: int) -> None:
        """Carry every summary one step: ``e`` appended after the run's ``m`` emissions."""
        for (interval, c), theta in self.thetas.items():
            need = _closing(e, c)
            if self.folds[interval][1] < need:
                self.thetas[interval, c] = max(theta, need - m * interval)
        for interval, f in self.folds.items():
            f[0] += interval
            f[1] = max(f[1], e) + interval
            f[2] = max(f[2], (m + 1) * interval - e)


class _Page(_Run):
    __slots__ = ("tags", "times")

    def __init__(self, times: list[int], tags: list[int]) -> None:
        super().__init__()
        self.times = times
        self.tags = tags

    def fold(self, interval: int) -> Fold:
        f = self.folds.get(interval)
        if f is None:
            b, g = NONE, NONE
            for i, e in enumerate(self.times, 1):
                b = max(b, e) + interval
                g = max(g, i * interval - e)
            f = self.folds[interval] = [len(self.times) * interval, b, g]
        return f

    def theta(self, interval: int, c: int) -> int:
        theta = self.thetas.get((interval, c))
        if theta is None:
            self.fold(interval)  # carried along with theta (``carry``)
            b, theta = NONE, NONE
            for i, e in enumerate(self.times):
                need = _closing(e, c)
                if b < need:
                    theta = max(theta, need - i * interval)
                b = max(b, e) + interval
            self.thetas[interval, c] = theta
        return theta


class _Group(_Run):
    __slots__ = ("count", "edges", "pages", "stairs")

    def __init__(self, pages: list[_Page]) -> None:
        super().__init__()
        self.pages = pages
        self.count = sum(len(p.times) for p in pages)
        #: Per interval, its pages' maps from the group's start and bounds to its end.
        self.edges: dict[int, Edges] = {}
        #: Per view, when every page but the last is skipped (:meth:`skipped`).
        self.stairs: dict[tuple[int, int], Stairs] = {}

    def reshape(self) -> None:
        """A page but the last changed, or the pages did: drop what composed them."""
        self.edges.clear()
        self.stairs.clear()

    def skipped(self, interval: int, c: int, tau: int, right: int) -> bool:
        """Whether every page but the last is closed or over-full for the view ``(interval,
        c)``, given the arrival time ``tau`` entering the group and the bound ``right``
        before its last page: exactly each page's own test (:mod:`mailer.limits.gcra_search`), in
        O(log pages).

        Page ``p`` (maps ``A``, ``B`` from the group's start, ``S``, ``G`` to its last page,
        fold ``a``) is skipped iff ``B >= theta`` or ``B + G + a > c`` (whatever ``tau`` and
        ``right``: left out), or ``tau >= u_p``, or ``right >= v_p``, or ``tau + right + A_last
        > c``; pages sorted by ``u`` with the largest ``v`` after each give the answer."""
        stairs = self.stairs.get((interval, c))
        if stairs is None:
            stairs = self.stairs[interval, c] = self._stairs(interval, c)
        us, vs, a_last = stairs
        return tau + right + a_last > c or right >= vs[bisect_right(us, tau)]

    def _stairs(self, interval: int, c: int) -> Stairs:
        edges = self.page_edges(interval)
        pairs = sorted(_thresholds(edges, self.pages[:-1], interval, c))
        vs = [NONE] * (len(pairs) + 1)
        for k in range(len(pairs) - 1, -1, -1):
            vs[k] = max(vs[k + 1], pairs[k][1])
        return [u for u, _ in pairs], vs, edges[0][-1]

    def page_edges(self, interval: int) -> Edges:
        """The :data:`Edges` of its pages (kept until a page but the last changes)."""
        out = self.edges.get(interval)
        if out is None:
            out = self.edges[interval] = _edges([p.fold(interval) for p in self.pages])
        return out

    def fold(self, interval: int) -> Fold:
        f = self.folds.get(interval)
        if f is None:
            a, b, g = 0, NONE, NONE
            for page in self.pages:
                pa, pb, pg = page.fold(interval)
                a, b, g = a + pa, max(b + pa, pb), max(g, pg + a)
            f = self.folds[interval] = [a, b, g]
        return f

    def theta(self, interval: int, c: int) -> int:
        theta = self.thetas.get((interval, c))
        if theta is None:
            self.fold(interval)  # carried along with theta (``carry``)
            a, b, theta = 0, NONE, NONE
            for page in self.pages:
                pa, pb, _ = page.fold(interval)
                pt = page.theta(interval, c)
                if pt > b:
                    theta = max(theta, pt - a)
                a, b = a + pa, max(b + pa, pb)
            self.thetas[interval, c] = theta
        return theta


def _thresholds(
    edges: Edges, runs: Sequence[_Page | _Group], interval: int, c: int
) -> Iterator[tuple[int, int]]:
    """Per run (but the last of a sequence, with its :data:`Edges`): ``(u, v)``, the run is
    closed or over-full iff the arrival time entering the sequence is ``>= u``, or the bound
    before its last run ``>= v``, or their sum with ``edges``' last ``A`` is over ``c``
    (``(NONE, NONE)`` when it is so whatever they are)."""
    big_a, big_b, big_s, big_g = edges
    for p, run in enumerate(runs):
        a = run.fold(interval)[0]
        theta = run.theta(interval, c)
        if big_b[p] >= theta or big_b[p] + big_g[p] + a > c:
            yield NONE, NONE
        else:
            u = min(theta - big_a[p], c + 1 - big_a[p] - big_g[p] - a)
            yield u, c + 1 - big_b[p] - big_s[p] - a


#: A place among the bookings: (group, page, index in the page); None: after the last.
Place = tuple[int, int, int] | None


class Pages:
    """One gcra tier's bookings after now, sorted, in pages in groups, with summaries."""

    def __init__(self, page: int = PAGE, group: int = GROUP) -> None:
        self.groups: list[_Group] = []
        self.count = 0
        self._page, self._group = page, group
        #: Per interval, the groups' maps (:class:`~mailer.limits.gcra_maps.GroupMaps`), kept
        #: as far as a change allows.
        self._edges: dict[int, GroupMaps] = {}
        #: Per view, group ``j``'s (but the last's) :func:`_thresholds`, as far as asked (kept
        #: until a group but the last changes).
        self._skips: dict[tuple[int, int], dict[int, tuple[int, int]]] = {}
        #: The last page's gaps a search read (:meth:`gaps`), until the bookings change.
        self._walked: tuple[_Page, tuple[int, int, int], list[int], list[int]] | None = None

    def gaps(self, page: _Page, interval: int, tau: int, right: int) -> tuple[list[int], list[int]]:
        """``tat_k`` and ``R_k`` at each gap ``k`` of ``page`` (0 .. its length), entered at the
        arrival time ``tau`` with the bound ``right`` after it: the one page a decision's
        searches walk is read once (kept until the bookings change)."""
        walked = self._walked
        if walked is not None and walked[0] is page and walked[1] == (interval, tau, right):
            return walked[2], walked[3]
        times = page.times
        tats = [tau]
        for e in times:
            tats.append(max(tats[-1], e) + interval)
        rights = [right] * (len(times) + 1)
        for k in range(len(times) - 1, -1, -1):
            rights[k] = max(rights[k + 1] + interval, interval - times[k])
        self._walked = page, (interval, tau, right), tats, rights
        return tats, rights

    def forget(self) -> None:
        """Drop every summary kept (each is computed again where a search needs it)."""
        self._walked = None
        self._edges.clear()
        self._skips.clear()
        for group in self.groups:
            group.forget()
            group.reshape()
            for page in group.pages:
                page.forget()

    def threshold(self, interval: int, c: int, j: int) -> tuple[int, int]:
        """Group ``j``'s (not the last's) :func:`_thresholds` for the view ``(interval, c)``."""
        known = self._skips.setdefault((interval, c), {})
        out = known.get(j)
        if out is None:
            maps = self.maps(interval)
            big_a, big_b = maps.before(j)
            big_s, big_g = maps.after(j)
            edges = [big_a], [big_b], [big_s], [big_g]
            out = known[j] = next(_thresholds(edges, [self.groups[j]], interval, c))
        return out

    def thresholds(self, interval: int, c: int) -> tuple[list[int], list[int]]:
        """Each group's but the last's :func:`_thresholds` for the view, as two lists."""
        pairs = [self.threshold(interval, c, j) for j in range(len(self.groups) - 1)]
        return [u for u, _ in pairs], [v for _, v in pairs]

    def maps(self, interval: int) -> GroupMaps:
        """The groups' maps for ``interval``, computed as far as asked."""
        out = self._edges.get(interval)
        if out is None:
            out = self._edges[interval] = GroupMaps(self.groups, interval)
        return out

    def group_edges(self, interval: int) -> Edges:
        """:meth:`_Group.page_edges` for the groups."""
        return self.maps(interval).edges()

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __iter__(self) -> Iterator[int]:
        for group in self.groups:
            for page in group.pages:
                yield from page.times

    def entries(self) -> Iterator[tuple[int, int]]:
        """Every booking as ``(µs, tag)``, in order."""
        for group in self.groups:
            for page in group.pages:
                yield from zip(page.times, page.tags, strict=True)

    def locate(self, us: int) -> Place:
        """The place of the first booking after ``us`` (µs)."""
        gi = bisect_right(self.groups, us, key=lambda g: g.pages[-1].times[-1])
        if gi == len(self.groups):
            return None
        pages = self.groups[gi].pages
        pi = bisect_right(pages, us, key=lambda p: p.times[-1])
        return gi, pi, bisect_right(pages[pi].times, us)

    def add(self, x_us: int, tag: int) -> None:
        """Insert a booking at ``x_us`` after those at the same time."""
        self.count += 1
        self._walked = None
        if not self.groups:
            page = _Page([x_us], [tag])
            self.groups.append(_Group([page]))
            self._edges.clear()
            self._skips.clear()
            return
        gi = min(
            bisect_right(self.groups, x_us, key=lambda g: g.pages[-1].times[-1]),
            len(self.groups) - 1,
        )
        group = self.groups[gi]
        pi = min(bisect_right(group.pages, x_us, key=lambda p: p.times[-1]), len(group.pages) - 1)
        page = group.pages[pi]
        i = bisect_right(page.times, x_us)
        self._changed(gi, pi)
        if i == len(page.times):  # after the page's last: its summaries carried one step
            page.carry(x_us, i)
            if pi == len(group.pages) - 1:
                group.carry(x_us, group.count)
            else:
                group.forget()
        else:
            page.forget()
            group.forget()
        page.times.insert(i, x_us)
        page.tags.insert(i, tag)
        group.count += 1
        if len(page.times) > self._page:
            self._split_page(gi, pi)

    def _split_page(self, gi: int, pi: int) -> None:
        group = self.groups[gi]
        page = group.pages[pi]
        at = len(page.times) - 1 if self._is_end(gi, pi) else len(page.times) // 2
        group.pages.insert(pi + 1, _Page(page.times[at:], page.tags[at:]))
        del page.times[at:], page.tags[at:]
        page.forget()
        group.reshape()
        if len(group.pages) > self._group:
            at = len(group.pages) - 1 if gi == len(self.groups) - 1 else len(group.pages) // 2
            self.groups.insert(gi + 1, _Group(group.pages[at:]))
            del group.pages[at:]
            group.count -= self.groups[gi + 1].count
            group.forget()
            group.reshape()
            self._edges.clear()
            self._skips.clear()

    def _changed(self, gi: int, pi: int) -> None:
        """Page ``pi`` of group ``gi`` changes: drop the edges that composed it (the groups'
        and their thresholds leave the last group out: an append keeps them)."""
        group = self.groups[gi]
        if pi < len(group.pages) - 1:
            group.reshape()
        if gi < len(self.groups) - 1:
            for maps in self._edges.values():
                maps.changed(gi)
            self._skips.clear()

    def _is_end(self, gi: int, pi: int) -> bool:
        return gi == len(self.groups) - 1 and pi == len(self.groups[gi].pages) - 1

    def remove(self, tag: int, at: int) -> bool:
        """Remove the last booking tagged ``tag`` whose slot (µs rounded up to the ms) is
        ``at`` ms; False when none."""
        if not self.groups:
            return False
        place = self.locate(at * 1000)
        if place is None:
            gi = len(self.groups) - 1
            pi = len(self.groups[gi].pages) - 1
            place = gi, pi, len(self.groups[gi].pages[pi].times)
        gi, pi, i = place
        while True:  # back from the last booking at or before the slot's end
            i -= 1
            while i < 0:
                if pi:
                    pi -= 1
                elif gi:
                    gi -= 1
                    pi = len(self.groups[gi].pages) - 1
                else:
                    return False
                i = len(self.groups[gi].pages[pi].times) - 1
            page = self.groups[gi].pages[pi]
            if _ceil_ms(page.times[i]) < at:
                return False
            if page.tags[i] == tag:
                self._delete(gi, pi, i, i + 1)
                return True

    def _delete(self, gi: int, pi: int, start: int, end: int) -> None:
        self._walked = None
        group = self.groups[gi]
        page = group.pages[pi]
        self._changed(gi, pi)
        del page.times[start:end], page.tags[start:end]
        page.forget()
        group.forget()
        group.count -= end - start
        self.count -= end - start
        if not page.times:
            del group.pages[pi]
            group.reshape()
            if not group.pages:
                del self.groups[gi]
                self._edges.clear()
                self._skips.clear()

    def pop_until(self, now_us: int) -> Iterator[tuple[int, int]]:
        """Take out the bookings at or before ``now_us``, yielding them in order."""
        while self.groups:
            page = self.groups[0].pages[0]
            if page.times[0] > now_us:
                return
            cut = bisect_right(page.times, now_us)
            taken = list(zip(page.times[:cut], page.tags[:cut], strict=True))
            self._delete(0, 0, 0, cut)
            yield from taken

    def tat(self, floor: int, interval: int) -> int:
        """The arrival time after every booking, from ``floor`` (µs)."""
        if not self.groups:
            return floor
        maps = self.maps(interval)
        big_a = (self.count - self.groups[-1].count) * interval
        a, b, _ = self.groups[-1].fold(interval)
        return max(max(floor + big_a, maps.total_b()) + a, b)
