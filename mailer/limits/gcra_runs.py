"""The runs of a gcra tier's bookings (:mod:`mailer.limits.gcra_pages`): a page of bookings
and a group of pages, each with its summaries by view, kept until the run changes.

For a view (interval ``T`` µs, ``c = (L-1)·T``) a run of emissions ``e_1 .. e_m`` is summarised by
its fold ``[a, b, g]`` (it maps the arrival time ``tau`` entering it to ``max(tau + a, b)`` and
the bound ``R`` after it to ``max(R + a, g)`` before it) and its threshold ``theta`` (every gap
ending at one of its emissions admits no ms when ``tau >= theta``): docs/explanation/limiter.md,
"Long gcra backlogs: pages with summaries".
"""

# ruff: noqa: PLR1730 - the summary and walk loops compare inline: a max() call per step
# costs about as much as the step

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence

from mailer.limits.gcra_maps import NONE, Edges, Fold

__all__ = ["Group", "Page", "Run", "Stairs", "closing", "compose_edges", "thresholds"]

#: A group's pages as :meth:`Group.skipped` sorts them: ``u`` ascending, the largest ``v``
#: from each on (one more: none), and the sum of ``a`` over every page but the last.
Stairs = tuple[list[int], list[int], int]


def compose_edges(folds: list[Fold]) -> Edges:
    """The :data:`Edges` of consecutive runs with these folds, the last left out."""
    folds = folds[:-1]
    big_a, big_b = [0], [NONE]
    a_sum, b_sum = 0, NONE
    for a, b, _ in folds:
        b_sum += a
        if b > b_sum:
            b_sum = b
        a_sum += a
        big_a.append(a_sum)
        big_b.append(b_sum)
    big_s, big_g = [0] * len(folds), [NONE] * len(folds)
    s_sum, g_sum = 0, NONE
    for j in range(len(folds) - 1, 0, -1):
        a, _, g = folds[j]
        g_sum += a
        if g > g_sum:
            g_sum = g
        s_sum += a
        big_s[j - 1], big_g[j - 1] = s_sum, g_sum
    return big_a, big_b, big_s, big_g


def closing(e: int, c: int) -> int:
    """The arrival time from which the gap ending at emission ``e`` admits no ms."""
    return c + (-(-e // 1000) - 1) * 1000 + 1


class Run:
    """A page (``times``/``tags``) or a group (``pages``), with its summaries by view."""

    __slots__ = ("folds", "thetas")

    def __init__(self) -> None:
        self.folds: dict[int, Fold] = {}  # interval -> [a, b, g]
        self.thetas: dict[tuple[int, int], int] = {}  # (interval, c) -> theta

    def forget(self) -> None:
        self.folds.clear()
        self.thetas.clear()

    def theta(self, interval: int, c: int) -> int:
        """The threshold for view ``(interval, c)``, kept until the run changes."""
        theta = self.thetas.get((interval, c))
        if theta is None:
            theta = self._summarize(interval, c)
        return theta

    def _summarize(self, interval: int, c: int) -> int:
        """The threshold for ``(interval, c)`` (and the fold, when not kept), stored."""
        raise NotImplementedError

    def carry(self, e: int, m: int) -> None:
        """Carry every summary one step: ``e`` appended after the run's ``m`` emissions."""
        for (interval, c), theta in self.thetas.items():
            need = closing(e, c)
            if self.folds[interval][1] < need:
                self.thetas[interval, c] = max(theta, need - m * interval)
        for interval, f in self.folds.items():
            f[0] += interval
            f[1] = max(f[1], e) + interval
            f[2] = max(f[2], (m + 1) * interval - e)


class Page(Run):
    __slots__ = ("tags", "times")

    def __init__(self, times: list[int], tags: list[int]) -> None:
        super().__init__()
        self.times = times
        self.tags = tags

    def fold(self, interval: int) -> Fold:
        f = self.folds.get(interval)
        if f is None:  # alone: a search that walks to a booking asks for no threshold
            b = g = NONE
            step = 0  # i·interval at the i-th emission
            for e in self.times:
                step += interval
                if e > b:
                    b = e
                b += interval
                if step - e > g:
                    g = step - e
            f = self.folds[interval] = [step, b, g]
        return f

    def _summarize(self, interval: int, c: int) -> int:
        """The threshold for ``(interval, c)``, and the fold when it is not kept, in one pass."""
        b = g = theta = NONE
        step = 0  # (i-1)·interval at the i-th emission
        base = c - 999  # closing(e, c) = base + ceil(e / 1000)·1000
        for e in self.times:
            need = base - (-e // 1000) * 1000
            if b < need and need - step > theta:
                theta = need - step
            if e > b:
                b = e
            b += interval
            step += interval
            if step - e > g:
                g = step - e
        if interval not in self.folds:  # carried along with theta (``carry``)
            self.folds[interval] = [step, b, g]
        self.thetas[interval, c] = theta
        return theta


class Group(Run):
    __slots__ = ("count", "edges", "pages", "stairs")

    def __init__(self, pages: list[Page]) -> None:
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
        pairs = sorted(thresholds(edges, self.pages[:-1], interval, c))
        vs = [NONE] * (len(pairs) + 1)
        for k in range(len(pairs) - 1, -1, -1):
            vs[k] = max(vs[k + 1], pairs[k][1])
        return [u for u, _ in pairs], vs, edges[0][-1]

    def page_edges(self, interval: int) -> Edges:
        """The :data:`Edges` of its pages (kept until a page but the last changes)."""
        out = self.edges.get(interval)
        if out is None:
            out = self.edges[interval] = compose_edges([p.fold(interval) for p in self.pages])
        return out

    def fold(self, interval: int) -> Fold:
        """Its pages' folds composed: the maps over every page but the last (its
        :meth:`page_edges`, which the search reads too), then the last page's."""
        f = self.folds.get(interval)
        if f is None:
            pages = self.pages
            la, lb, lg = pages[-1].fold(interval)
            if len(pages) == 1:
                f = [la, lb, lg]
            else:
                big_a, big_b, big_s, big_g = self.page_edges(interval)
                fa, _, fg = pages[0].fold(interval)
                right = max(lg + big_s[0], big_g[0])  # the bound before page 1
                f = [big_a[-1] + la, max(big_b[-1] + la, lb), max(right + fa, fg)]
            self.folds[interval] = f
        return f

    def _summarize(self, interval: int, c: int) -> int:
        """The threshold for ``(interval, c)``, and the fold when it is not kept, in one pass
        over the pages' summaries."""
        a, b, g, theta = 0, NONE, NONE, NONE
        for page in self.pages:
            pt = page.theta(interval, c)  # makes the page's fold too
            pa, pb, pg = page.folds[interval]
            if pt > b and pt - a > theta:
                theta = pt - a
            if pg + a > g:
                g = pg + a
            a += pa
            b += pa
            if pb > b:
                b = pb
        if interval not in self.folds:  # carried along with theta (``carry``)
            self.folds[interval] = [a, b, g]
        self.thetas[interval, c] = theta
        return theta


def thresholds(
    edges: Edges, runs: Sequence[Page | Group], interval: int, c: int
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
