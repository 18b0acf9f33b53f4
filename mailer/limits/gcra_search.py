"""The paged gcra search over :class:`~mailer.limits.gcra_pages.Pages`: the answers of the
linear search of :mod:`mailer.limits.gcra_log`, reading only what the summaries cannot skip.

From ``t``, place by place: at a group's start, jump every group whose summary proves it
closed or over-full (each group's thresholds, kept per view: a scan of integers), else skip the
group when each of its pages is proved so (their thresholds sorted: O(log pages)); at a page's
start, skip the page likewise; otherwise read the page and walk its gaps as the linear search
does, with the arrival time entering it and the bound after it from the composed maps. The gap
after the last booking, and an admission now after a fold, need the maps only.

A search starts where the same view's last search (same floor) found that nothing fits: a
booking added keeps that true (it only fills spans), a booking taken out drops it
(:attr:`Pages.closed`). So the mails booked one after another into the room at the front of
a backlog each start at the previous one's slot, not at the closed front.
"""

# ruff: noqa: PLR1730 - the summary and walk loops compare inline: a max() call per step
# costs about as much as the step

from __future__ import annotations

from mailer.limits.gcra_pages import NONE, Edges, Fold, Pages, Place


def _ceil_ms(us: int) -> int:
    return -(-us // 1000)


def earliest(  # noqa: PLR0917 - gcra_log.earliest's arguments
    pages: Pages, floor: int, limit: int, interval: int, t: int, now: int, now_us: int
) -> int:
    """:func:`mailer.limits.gcra_log.earliest` over ``pages``: the earliest ms ``>= t`` at
    which one more emission keeps the view ``(limit, interval)`` from ``floor``; ``t == now``
    asks for an admission at ``now_us`` first. A search that answered ``x`` from ``t0``
    answers every ``t`` in ``[t0, x]`` (nothing fits before ``x``, ``x`` fits), so the same
    question asked again from its answer, as a decision does, is not searched twice
    (:attr:`Pages.answers`, until the bookings change)."""
    key = (interval, floor, limit, now_us)
    known = pages.answers.get(key)
    if known is not None and known[0] <= t <= known[1]:
        return known[1]
    x = _search(pages, floor, limit, interval, t, now, now_us)
    pages.answers[key] = (t, x)
    return x


def _search(  # noqa: PLR0917 - earliest's arguments
    pages: Pages, floor: int, limit: int, interval: int, t: int, now: int, now_us: int
) -> int:
    """:func:`earliest`, searched."""
    c = (limit - 1) * interval
    view = _View(pages, floor, interval, c)
    if t == now:
        tat, right = view.bounds(pages.locate(now_us))
        if tat - now_us <= c and right + now_us <= c and tat + right <= c:
            return now
        t = now + 1
    start, x = t, t
    hint = pages.closed.get((interval, limit))
    if hint is not None and hint[0] == floor and hint[1] <= t <= hint[2]:
        start, x = hint[1], hint[2]  # nothing fits from hint[1] to hint[2] (excluded)
    x = _scan(pages, view, x)
    pages.closed[interval, limit] = (floor, start, x)
    return x


def _scan(pages: Pages, view: _View, x: int) -> int:
    """The earliest ms ``>= x`` at which a booking fits the view (no admission now)."""
    place = pages.locate(x * 1000)
    while place is not None:
        gi, pi, i = place
        runs = pages.groups[gi].pages
        if i == 0 and pi == 0 and (far := view.kept_from(gi)) > gi:  # groups gi .. far-1
            x = max(x, _ceil_ms(pages.groups[far - 1].pages[-1].times[-1]))
            place = pages.locate(x * 1000)
        elif i == 0 and pi == 0 and view.skips_group(gi):
            x = max(x, _ceil_ms(runs[-1].times[-1]))
            place = _next(pages, gi, len(runs) - 1, x)
        elif i == 0 and (far := view.kept_page(gi, pi)) > pi:  # pages pi .. far-1 skipped
            x = max(x, _ceil_ms(runs[far - 1].times[-1]))
            place = _next(pages, gi, far - 1, x)
        else:
            x, found = view.walk(place, x)
            if found:
                return x
            place = pages.locate(x * 1000)
    tat = pages.tat(view.floor, view.interval)
    x = max(x, _ceil_ms(tat - view.c))
    pages.found[view.interval, view.floor] = (x * 1000, tat, NONE)
    return x


def _next(pages: Pages, gi: int, pi: int, x: int) -> Place:
    """:meth:`Pages.locate` of ``x`` ms, past page ``pi`` of group ``gi``: the next page's start
    when nothing there is at or before ``x``."""
    if pi + 1 < len(pages.groups[gi].pages):
        pi += 1
    elif gi + 1 < len(pages.groups):
        gi, pi = gi + 1, 0
    else:
        return pages.locate(x * 1000)
    if pages.groups[gi].pages[pi].times[0] > x * 1000:
        return gi, pi, 0
    return pages.locate(x * 1000)


def used(pages: Pages, floor: int, interval: int, at_us: int) -> int:
    """:func:`mailer.limits.gcra_log.used` over ``pages``; at the booking just made where a
    search found it, from the gap that search found (:attr:`Pages.booked`)."""
    booked = pages.booked.get((interval, floor))
    if booked is not None and booked[0] == at_us:
        tat, right = booked[1], booked[2]
    else:
        tat, right = _View(pages, floor, interval, 0).bounds(pages.locate(at_us))
    ahead = max(0, tat - at_us) + max(0, right + at_us)
    return -(-ahead // interval)


def _at(edges: Edges, last: Fold, j: int, around: tuple[int, int]) -> tuple[int, int]:
    """The arrival time entering run ``j`` and the bound after it, from ``around``: the
    arrival time entering the runs and the bound after them (``last``: the last run's fold)."""
    big_a, big_b, big_s, big_g = edges
    tau, right = around
    tau = max(tau + big_a[j], big_b[j])
    if j < len(big_s):  # the bound before the last run, carried back to run j
        right = max(max(right + last[0], last[2]) + big_s[j], big_g[j])
    return tau, right


class _View:
    """One search's view ``(interval, c)`` of the bookings from ``floor``: the arrival time
    entering and the bound after each group and page, from the maps the bookings keep."""

    def __init__(self, pages: Pages, floor: int, interval: int, c: int) -> None:
        self.pages, self.floor, self.interval, self.c = pages, floor, interval, c
        self._maps = pages.maps(interval)
        self._at: dict[int, tuple[int, int]] = {}

    def at_group(self, gi: int) -> tuple[int, int]:
        """The arrival time entering group ``gi`` and the bound after it (:func:`_at` over
        the groups, from the maps composed as far as ``gi`` only)."""
        out = self._at.get(gi)
        if out is None:
            big_a, big_b = self._maps.before(gi)
            tau, right = max(self.floor + big_a, big_b), NONE
            if gi < len(self.pages.groups) - 1:  # the bound before the last group, carried back
                last = self.pages.groups[-1].fold(self.interval)
                big_s, big_g = self._maps.after(gi)
                right = max(max(right + last[0], last[2]) + big_s, big_g)
            out = self._at[gi] = (tau, right)
        return out

    def at_page(self, gi: int, pi: int) -> tuple[int, int]:
        """:meth:`at_group` for page ``pi`` of group ``gi``."""
        group = self.pages.groups[gi]
        edges = group.page_edges(self.interval)
        return _at(edges, group.pages[-1].fold(self.interval), pi, self.at_group(gi))

    def kept_from(self, gi: int) -> int:
        """The first group from ``gi`` whose summary does not prove it closed or over-full
        (the last group is never proved so here): each group's thresholds are computed when
        the scan reaches it, so a scan that stops at once reads one group's."""
        pages, interval, c = self.pages, self.interval, self.c
        n = len(pages.groups) - 1
        last = pages.groups[-1]
        a, _, g = last.fold(interval)
        floor, before = self.floor, max(NONE + a, g)  # the bound before the last group
        if floor + before + (pages.count - last.count) * interval > c:  # A over every group
            return n
        maps = self._maps
        while gi < n:
            big_a, big_b = maps.before(gi)  # closed: the arrival time entering it is enough
            if floor + big_a < pages.groups[gi].theta(interval, c) > big_b:
                u, v = pages.threshold(interval, c, gi)
                if floor < u and before < v:
                    break
            gi += 1
        return gi

    def skips_group(self, gi: int) -> bool:
        """Whether every gap ending at one of group ``gi``'s bookings is closed or over-full:
        its summary says so, or each of its pages' does."""
        group = self.pages.groups[gi]
        tau, right = self.at_group(gi)
        a, _, _ = group.fold(self.interval)
        if tau >= group.theta(self.interval, self.c) or tau + right + a > self.c:
            return True
        if not self.skips_page(gi, len(group.pages) - 1):
            return False
        a, _, g = group.pages[-1].fold(self.interval)
        return group.skipped(self.interval, self.c, tau, max(right + a, g))

    def kept_page(self, gi: int, pi: int) -> int:
        """The first page from ``pi`` of group ``gi`` that :meth:`skips_page` does not skip
        (one past the last: none); a page proved so from its start is so from any point in it."""
        group, interval, c = self.pages.groups[gi], self.interval, self.c
        runs, last = group.pages, len(group.pages) - 1
        if pi < last:
            big_a, big_b, big_s, big_g = group.page_edges(interval)
            tau0, right0 = self.at_group(gi)
            a, _, g = runs[-1].fold(interval)
            before = right0 + a if right0 + a > g else g  # the bound before the last page
            while pi < last:
                page = runs[pi]
                theta = page.theta(interval, c)  # makes the page's fold too
                tau = tau0 + big_a[pi]
                if big_b[pi] > tau:
                    tau = big_b[pi]
                right = before + big_s[pi]
                if big_g[pi] > right:
                    right = big_g[pi]
                if tau < theta and tau + right + page.folds[interval][0] <= c:
                    return pi
                pi += 1
        if self.skips_page(gi, last):
            return last + 1
        return last

    def skips_page(self, gi: int, pi: int) -> bool:
        """:meth:`skips_group` for page ``pi`` of group ``gi``."""
        page = self.pages.groups[gi].pages[pi]
        tau, right = self.at_page(gi, pi)
        a = page.fold(self.interval)[0]
        return tau >= page.theta(self.interval, self.c) or tau + right + a > self.c

    def bounds(self, place: Place) -> tuple[int, int]:
        """``tat_k`` and ``R_k`` at the gap before the booking at ``place`` (None: after all)."""
        if place is None:
            return self.pages.tat(self.floor, self.interval), NONE
        gi, pi, i = place
        page, interval = self.pages.groups[gi].pages[pi], self.interval
        tat, right = self.at_page(gi, pi)
        if i == 0:  # the page's first gap: its summary is enough
            a, _, g = page.fold(interval)
            return tat, max(right + a, g)
        tats, rights = self.pages.gaps(page, interval, tat, right)
        return tats[i], rights[i]

    def walk(self, place: tuple[int, int, int], x: int) -> tuple[int, bool]:
        """The linear search through the gaps of one page from ``place``: ``(x, True)`` when
        ``x`` fits there, else ``(x, False)`` with ``x`` past the page's last booking."""
        gi, pi, i = place
        page, c = self.pages.groups[gi].pages[pi], self.c
        tats, rights = self.pages.gaps(page, self.interval, *self.at_page(gi, pi))
        times, m = page.times, len(page.times)
        while i < m:
            tat, right, e = tats[i], rights[i], times[i]
            if tat + right <= c:
                lo = -((c - tat) // 1000)  # ceil((tat - c) / 1000)
                if lo > x:
                    x = lo
                if x * 1000 < e and right + x * 1000 <= c:
                    self.pages.found[self.interval, self.floor] = (x * 1000, tat, right)
                    return x, True
            lo = -(-e // 1000)
            if lo > x:
                x = lo
            i += 1  # past the emissions at or before x ms
            while i < m and times[i] <= x * 1000:
                i += 1
        return x, False
