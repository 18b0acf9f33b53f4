"""The composed maps over a gcra tier's groups of pages (:mod:`mailer.limits.gcra_pages`), kept
as far as a search asks and as far as a change allows.

For a view of interval ``T`` (µs), a run of emissions (a page, a group) maps the arrival time
``tau`` entering it to ``max(tau + a, b)`` and the bound ``R`` after it to ``max(R + a, g)``
before it (its fold ``[a, b, g]``). Over a sequence of runs, the last left out (so that an
append keeps them), the maps before each run (``A``, ``B``) compose from the first run on and
those after it (``S``, ``G``) from the last back. A booking inside group ``gi`` changes only
the maps before the groups after ``gi`` and after the groups before it: kept lazily, a booking
near the front costs the search O(1) groups, one near the end O(1) too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

#: Below any time: ``R`` when no emission follows.
NONE = -(1 << 80)
#: A run's ``[a, b, g]`` for one interval (µs), mutable: carried one step on an append.
Fold = list[int]
#: Per run of a sequence but the last: the composed maps ``A``, ``B`` before it (one more:
#: before the last run) and ``S``, ``G`` after it up to the last run. The last run is left out
#: so that appending to it (a newsletter's bookings) keeps them.
Edges = tuple[list[int], list[int], list[int], list[int]]


class _Folded(Protocol):
    def fold(self, interval: int) -> Fold: ...


class GroupMaps:
    """The groups' :data:`Edges` for one interval (the last group left out), computed as far
    as a search asks: the maps before group ``j`` (``A``, ``B``) from the first group on, the
    bounds after it (``S``, ``G``) and the arrival map of the groups from it on (``B`` composed
    over ``j .. n-1``, for ``Pages.tat``) from the last back. A change inside group ``gi``
    keeps the maps before it up to ``gi`` and those after it from ``gi`` on, so a booking near
    the front costs O(1) groups here, not O(n / (PAGE·GROUP))."""

    __slots__ = ("big_a", "big_b", "big_g", "big_s", "groups", "interval", "tail_b")

    def __init__(self, groups: Sequence[_Folded], interval: int) -> None:
        self.groups, self.interval = groups, interval
        n = len(groups) - 1  # the groups composed: every one but the last
        self.big_a, self.big_b = [0], [NONE]  # valid for j < len
        #: Indexed from the end: [k] is group n-1-k's; valid for k < len.
        self.big_s: list[int] = [0] if n > 0 else []
        self.big_g: list[int] = [NONE] if n > 0 else []
        self.tail_b: list[int] = [NONE]  # [k]: B over groups n-k .. n-1

    def changed(self, gi: int) -> None:
        """Group ``gi`` (not the last) changed inside: the maps composing it are dropped."""
        n = len(self.groups) - 1
        del self.big_a[gi + 1 :], self.big_b[gi + 1 :]
        del self.big_s[n - gi :], self.big_g[n - gi :]
        del self.tail_b[n - gi :]

    def before(self, j: int) -> tuple[int, int]:
        """``A``, ``B`` before group ``j`` (0 <= j <= n)."""
        big_a, big_b, interval = self.big_a, self.big_b, self.interval
        while len(big_a) <= j:
            a, b, _ = self.groups[len(big_a) - 1].fold(interval)
            big_b.append(max(big_b[-1] + a, b))
            big_a.append(big_a[-1] + a)
        return big_a[j], big_b[j]

    def after(self, j: int) -> tuple[int, int]:
        """``S``, ``G`` after group ``j`` up to the last one (0 <= j < n)."""
        big_s, big_g, interval = self.big_s, self.big_g, self.interval
        n = len(self.groups) - 1
        while len(big_s) < n - j:
            a, _, g = self.groups[n - len(big_s)].fold(interval)
            big_g.append(max(big_g[-1] + a, g))
            big_s.append(big_s[-1] + a)
        return big_s[n - 1 - j], big_g[n - 1 - j]

    def total_b(self) -> int:
        """``B`` over every group but the last (``Edges``' last ``B``), from the back."""
        tail_b, interval = self.tail_b, self.interval
        n = len(self.groups) - 1
        while len(tail_b) <= n:
            j = n - len(tail_b)
            s = self.after(j)[0]
            tail_b.append(max(tail_b[-1], self.groups[j].fold(interval)[1] + s))
        return tail_b[n]

    def edges(self) -> Edges:
        """Every map, as :func:`~mailer.limits.gcra_runs.compose_edges` gives them."""
        n = len(self.groups) - 1
        self.before(max(n, 0))
        if n > 0:
            self.after(0)
        return self.big_a[:], self.big_b[:], self.big_s[::-1], self.big_g[::-1]
