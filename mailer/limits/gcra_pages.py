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

# ruff: noqa: PLR1730 - the summary and walk loops compare inline: a max() call per step
# costs about as much as the step

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator

from mailer.limits.gcra_maps import NONE, Edges, Fold, GroupMaps
from mailer.limits.gcra_runs import Group, Page, thresholds

__all__ = ["GROUP", "NONE", "PAGE", "Edges", "Fold", "Pages", "Place"]

#: The most bookings a page keeps before it is cut in two (the last one: a new page starts).
PAGE = 32
#: The most pages a group keeps before it is cut in two (the last one: a new group starts).
GROUP = 16


def _ceil_ms(us: int) -> int:
    return -(-us // 1000)


#: A place among the bookings: (group, page, index in the page); None: after the last.
Place = tuple[int, int, int] | None


class Pages:
    """One gcra tier's bookings after now, sorted, in pages in groups, with summaries."""

    def __init__(self, page: int = PAGE, group: int = GROUP) -> None:
        self.groups: list[Group] = []
        self.count = 0
        self._page, self._group = page, group
        #: Per interval, the groups' maps (:class:`~mailer.limits.gcra_maps.GroupMaps`), kept
        #: as far as a change allows.
        self._edges: dict[int, GroupMaps] = {}
        #: Per view, group ``j``'s (but the last's) :func:`~mailer.limits.gcra_runs.thresholds`,
        #: as far as asked (kept until a group but the last changes).
        self._skips: dict[tuple[int, int], dict[int, tuple[int, int]]] = {}
        #: The last page's gaps a search read (:meth:`gaps`), until the bookings change.
        self._walked: tuple[Page, tuple[int, int, int], list[int], list[int]] | None = None
        #: Per view ``(interval, base)``, the last search's answer (µs) and ``tat`` and ``R``
        #: at the gap it found it in, until the bookings change.
        self.found: dict[tuple[int, int], tuple[int, int, int]] = {}
        #: The same at the gap after the booking :meth:`add` just made there (``tat`` carried
        #: past it, the same ``R``): the room after it without a walk, until the next change.
        self.booked: dict[tuple[int, int], tuple[int, int, int]] = {}
        #: Per search ``(interval, base, limit, now_us)``, where its last search started (ms)
        #: and what it answered (:func:`~mailer.limits.gcra_search.earliest`), until the
        #: bookings change.
        self.answers: dict[tuple[int, int, int, int], tuple[int, int]] = {}
        #: Per search ``(interval, limit)``, its last search's floor (µs), where it started and
        #: what it answered (ms): no booking fits from that start to that answer (excluded),
        #: and a booking added keeps it so (it only adds emissions); until one is taken out.
        self.closed: dict[tuple[int, int], tuple[int, int, int]] = {}

    def gaps(self, page: Page, interval: int, tau: int, right: int) -> tuple[list[int], list[int]]:
        """``tat_k`` and ``R_k`` at each gap ``k`` of ``page`` (0 .. its length), entered at the
        arrival time ``tau`` with the bound ``right`` after it: the one page a decision's
        searches walk is read once (kept until the bookings change)."""
        walked = self._walked
        if walked is not None and walked[0] is page and walked[1] == (interval, tau, right):
            return walked[2], walked[3]
        times = page.times
        tats = [tau]
        tat = tau
        for e in times:
            if e > tat:
                tat = e
            tat += interval
            tats.append(tat)
        rights = [right] * (len(times) + 1)
        r = right
        for k in range(len(times) - 1, -1, -1):
            r += interval
            if interval - times[k] > r:
                r = interval - times[k]
            rights[k] = r
        self._walked = page, (interval, tau, right), tats, rights
        return tats, rights

    def forget(self) -> None:
        """Drop every summary kept (each is computed again where a search needs it)."""
        self._walked = None
        self._edges.clear()
        self._skips.clear()
        self.closed.clear()
        for group in self.groups:
            group.forget()
            group.reshape()
            for page in group.pages:
                page.forget()

    def threshold(self, interval: int, c: int, j: int) -> tuple[int, int]:
        """Group ``j``'s (not the last's) :func:`~mailer.limits.gcra_runs.thresholds` for the
        view ``(interval, c)``."""
        known = self._skips.setdefault((interval, c), {})
        out = known.get(j)
        if out is None:
            maps = self.maps(interval)
            big_a, big_b = maps.before(j)
            big_s, big_g = maps.after(j)
            edges = [big_a], [big_b], [big_s], [big_g]
            out = known[j] = next(thresholds(edges, [self.groups[j]], interval, c))
        return out

    def thresholds(self, interval: int, c: int) -> tuple[list[int], list[int]]:
        """Each group's but the last's :func:`~mailer.limits.gcra_runs.thresholds` for the view,
        as two lists."""
        pairs = [self.threshold(interval, c, j) for j in range(len(self.groups) - 1)]
        return [u for u, _ in pairs], [v for _, v in pairs]

    def maps(self, interval: int) -> GroupMaps:
        """The groups' maps for ``interval``, computed as far as asked."""
        out = self._edges.get(interval)
        if out is None:
            out = self._edges[interval] = GroupMaps(self.groups, interval)
        return out

    def group_edges(self, interval: int) -> Edges:
        """:meth:`~mailer.limits.gcra_runs.Group.page_edges` for the groups."""
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
        self.booked = {
            view: (x, max(tat, x) + view[0], right)
            for view, (x, tat, right) in self.found.items()
            if x == x_us
        }
        self.found, self.answers = {}, {}
        if not self.groups:
            page = Page([x_us], [tag])
            self.groups.append(Group([page]))
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
        group.pages.insert(pi + 1, Page(page.times[at:], page.tags[at:]))
        del page.times[at:], page.tags[at:]
        page.forget()
        group.reshape()
        last = gi == len(self.groups) - 1
        if len(group.pages) > self._group:
            at = len(group.pages) - 1 if last else len(group.pages) // 2
            if last:  # the last group changes: every map composed over the others
                self._edges.clear()
            else:  # those composing group gi (_changed), indexed from either end, hold
                for maps in self._edges.values():
                    maps.changed(gi)
            self.groups.insert(gi + 1, Group(group.pages[at:]))
            del group.pages[at:]
            group.count -= self.groups[gi + 1].count
            group.forget()
            group.reshape()
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
        self.found, self.booked, self.answers, self.closed = {}, {}, {}, {}
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
