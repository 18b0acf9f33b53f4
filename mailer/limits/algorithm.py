"""One decision over every scope of a policy, pure: no I/O, no clock, no lock.

A mail is admitted only when every tier of every scope it has a key in admits it; a refusal
consumes nothing anywhere; a booking books one slot, the earliest time every scope admits, in
all of them. The recipient's sliding log always keeps the mail's tag and slot, so the same mail
id gets its slot back and a release knows which window or bucket to give it back to. A shared
scope's sliding log keeps booked times only, and hints of where nothing fits, so that a
booking at the end of a long backlog looks only at the entries near it
(:mod:`mailer.limits.shared_log`). A shared key that keeps :attr:`Decider.max_bookings`
entries (``MAILGUARD_MAX_BOOKINGS``) refuses the next mail: ``scope`` set, no ``tier``.

Tier kinds, per scope key (times in ms, GCRA state in µs):

- ``sliding``: the exact log of :mod:`mailer.limits.sliding_log`; appending at ``x`` keeps tier
  ``(L, W)`` iff ``n < L`` or ``ts[n-L] <= x - W``. In the shared scopes a mail is inserted
  instead, before bookings already made when it fits (:mod:`mailer.limits.insertion`): shares
  then leave room for a code mail in every window, bookings included.
- ``fixed``: a count per calendar window (:mod:`mailer.limits.windows`); ``x`` fits iff the
  window holding ``x`` has fewer than ``L`` admissions, else the earliest is the next window's
  start.
- ``gcra``: emission interval ``T = ceil(W/L)`` µs (rounded up: never faster than the policy);
  the bucket's arrival time over every emission up to now (one timestamp) plus the emissions
  booked after now, so a mail may be inserted before bookings, as in the shared sliding tiers
  (:mod:`mailer.limits.gcra_log`). Without bookings: redis-cell's GCRA, ``x`` fits iff
  ``tat - x <= (L-1)·T``.

Never early: the decision compares with now rounded *down* to the ms and stores an admission
made now at now rounded *up*, so no admission is earlier than the policy allows, even by a
microsecond. Kind shares: in the shared scopes (domain, sender, tenant) a kind with share
``s < 1`` sees each tier's limit as ``max(1, floor(s·L))`` (a gcra tier: also its rate), so the
rest stays free for kinds with a larger share (``code`` keeps 1.0).

The in-process store (:mod:`mailer.limits.stores.scoped_memory`) runs this under its lock;
``stores/lua/scoped.lua`` mirrors it step for step for Redis.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import timezone
from zoneinfo import ZoneInfo

from mailer.limits import shared_log
from mailer.limits.checks import MAX_BOOKINGS, share_limit
from mailer.limits.decision import Decision
from mailer.limits.gcra_log import (
    GcraLog,
    expires_us,
    fold,
    give_back,
    insert,
    interval_us,
    share_floor,
    used,
)
from mailer.limits.gcra_log import earliest as gcra_earliest
from mailer.limits.insertion import earliest_insert_now, window_max
from mailer.limits.policy import Tier
from mailer.limits.scopes import Scope
from mailer.limits.shared_log import Hints
from mailer.limits.windows import window


@dataclass
class ScopeState:
    """What one scope key holds: a sliding log, a bucket per gcra tier, counts per fixed window."""

    ts: list[int] = field(default_factory=list)
    tags: list[int] = field(default_factory=list)  # the recipient's log only: shared logs keep none
    hints: Hints = field(default_factory=dict)  # a shared log's (mailer.limits.shared_log)
    gcra: dict[int, GcraLog] = field(default_factory=dict)  # tier index -> its bucket
    counts: dict[tuple[int, int], int] = field(default_factory=dict)  # (tier index, start) -> n
    expires_ms: int = 0

    @property
    def empty(self) -> bool:
        """Whether it holds nothing (a store may forget it)."""
        return not (self.ts or self.gcra or self.counts)


#: A mail's scopes with their states (None: nothing stored there), recipient first.
States = list[tuple[Scope, ScopeState | None]]


class Decider:
    """The decision's rules for scopes whose ``fixed`` windows align to ``tz``."""

    def __init__(self, tz: timezone | ZoneInfo, max_bookings: int = MAX_BOOKINGS) -> None:
        self.tz = tz
        #: The most entries one shared scope's key keeps (``MAILGUARD_MAX_BOOKINGS``).
        self.max_bookings = max_bookings

    def acquire(
        self,
        states: States,
        now_us: int,
        *,
        tag: int,
        max_wait_ms: int,
        share: float,
        not_before: int,
    ) -> Decision:
        """Admit, book or refuse one mail over ``states`` (every state present), recording it.

        A ``tag`` already in the recipient's log gets its slot back and records nothing.
        """
        head = states[0][1]
        if tag and head is not None and tag in head.tags:
            at = head.ts[head.tags.index(tag)]
            allowed = at <= -(-now_us // 1000)  # admitted now: stored at now rounded up
            return self.answer(states, now_us, allowed=allowed, at=at, bind=None, share=share)
        return self.decide(
            states,
            now_us,
            tag=tag,
            max_wait_ms=max_wait_ms,
            share=share,
            record=True,
            not_before=not_before,
        )

    def decide(
        self,
        states: States,
        now_us: int,
        *,
        tag: int,
        max_wait_ms: int,
        share: float,
        record: bool,
        not_before: int = 0,
    ) -> Decision:
        """The earliest time every tier of every scope admits, at or after ``not_before`` (ms);
        recorded when ``record`` and it is now or within ``max_wait_ms``."""
        now = now_us // 1000
        t, hi = now, -(-now_us // 1000)
        for scope, state in states:  # entries up to now rounded up do not delay a mail now
            if scope.shared:
                continue  # shared logs take mails by insertion (mailer.limits.insertion)
            if state is not None and state.ts and state.ts[-1] > max(t, hi):
                t = state.ts[-1]
        t = max(t, not_before)  # a hold's end (epoch ms; 0: none)
        bind: tuple[Scope, Tier] | None = None
        moved = True
        while moved:
            moved = False
            for scope, state in states:
                for i, tier in enumerate(scope.tiers):
                    fit = self.tier_earliest(scope, i, state, t, share=share, now_us=now_us)
                    if fit > t:
                        t, moved, bind = fit, True, (scope, tier)
        allowed = t == now
        booked = not allowed and record and t - now <= max_wait_ms
        full = self.full_scope(states) if record and (allowed or booked) else None
        if full is not None:  # refused: that scope's key keeps max_bookings entries already
            refused = self.answer(
                states, now_us, allowed=False, at=t, bind=None, share=share, booked=False
            )
            return refused._replace(scope=full)
        if allowed and record:
            for scope, state in states:
                assert state is not None
                self.record(scope, state, tag, (now_us, hi, now), now_us=now_us)
        elif booked:
            for scope, state in states:
                assert state is not None
                self.record(scope, state, tag, (t * 1000, t, t), now_us=now_us)
        return self.answer(
            states,
            now_us,
            allowed=allowed,
            at=t,
            bind=None if allowed else bind,
            share=share,
            booked=booked,
        )

    def full_scope(self, states: States) -> str | None:
        """The first shared scope whose key keeps :attr:`max_bookings` entries (its sliding
        log, or a gcra tier's listed bookings), else None."""
        for scope, state in states:
            if scope.shared and state is not None:
                kept = max((len(log.times) for log in state.gcra.values()), default=0)
                if max(kept, len(state.ts)) >= self.max_bookings:
                    return scope.name
        return None

    def tier_earliest(
        self, scope: Scope, i: int, state: ScopeState | None, t: int, *, share: float, now_us: int
    ) -> int:
        """Earliest ms >= ``t`` at which tier ``i`` of ``scope`` admits one more.

        The recipient's sliding tiers append; the shared scopes' insert
        (:mod:`mailer.limits.insertion`). A gcra tier compares an admission now with the real
        time ``now_us`` (µs), so a burst within one ms is not delayed by the ms rounding.
        """
        tier = scope.tiers[i]
        limit = share_limit(tier.limit, share) if scope.shared else tier.limit
        if state is None:
            return t
        if tier.kind == "sliding":
            return _sliding_earliest(scope, state, i, limit, t, now_us=now_us)
        if tier.kind == "gcra":
            log = state.gcra.get(i)
            return t if log is None else _gcra_earliest(log, tier, limit, t, now_us)
        while True:  # fixed: the first window from t's with room
            start, end = window(t, tier, self.tz)
            if state.counts.get((i, start), 0) < limit:
                return t
            t = end

    def room(
        self,
        scope: Scope,
        i: int,
        state: ScopeState,
        at: tuple[int, int],
        *,
        share: float,
        now_us: int,
    ) -> int:
        """How many more admissions tier ``i`` of ``scope`` holds in its window ending at
        ``at`` (``(ms, µs)``), bookings included."""
        tier = scope.tiers[i]
        limit = share_limit(tier.limit, share) if scope.shared else tier.limit
        if tier.kind == "sliding" and scope.shared:
            count = window_max(state.ts, at[0], tier.window_ms)
        elif tier.kind == "sliding":
            count = len(state.ts) - bisect_right(state.ts, at[0] - tier.window_ms)
        elif tier.kind == "gcra":
            log = state.gcra.get(i)
            return limit if log is None else _gcra_room(log, tier, limit, at[1], now_us)
        else:
            count = state.counts.get((i, window(at[0], tier, self.tz)[0]), 0)
        return max(0, limit - count)

    def answer(
        self,
        states: States,
        now_us: int,
        *,
        allowed: bool,
        at: int,
        bind: tuple[Scope, Tier] | None,
        share: float,
        booked: bool | None = None,
    ) -> Decision:
        """The :class:`Decision` for a mail admitted now or slotted at ``at`` (ms); ``booked``
        defaults to "not allowed" (a mail that holds its slot)."""
        now = now_us // 1000
        booked = not allowed if booked is None else booked
        seen = (at, at * 1000) if booked else (now, now_us)
        remaining = []
        for scope, state in states:
            for i in range(len(scope.tiers)):
                remaining.append(
                    self.room(scope, i, state or ScopeState(), seen, share=share, now_us=now_us)
                )
        return Decision(
            allowed,
            booked,
            at,
            0 if allowed else max(0, at - now),
            bind[1] if bind else None,
            tuple(remaining),
            bind[0].name if bind else None,
        )

    def record(
        self, scope: Scope, state: ScopeState, tag: int, x: tuple[int, int, int], *, now_us: int
    ) -> None:
        """Record one admission at ``x = (µs, stored ms rounded up, ms whose calendar window
        counts it)``."""
        x_us, x_ms, win_ms = x
        if scope.shared and scope.has_log:  # a shared log may hold later bookings: inserted
            shared_log.add(state.ts, x_ms)
        elif scope.has_log:  # the recipient's: in order, with the mail's tag
            at = bisect_right(state.ts, x_ms)
            state.ts.insert(at, x_ms)
            state.tags.insert(at, tag)
        expires = x_ms + scope.keep_ms
        for i, tier in enumerate(scope.tiers):
            if tier.kind == "gcra":
                log = state.gcra.setdefault(i, GcraLog())
                interval = interval_us(tier.limit, tier.window_ms)
                insert(log, x_us, tag, now_us, interval)
                expires = max(expires, -(-expires_us(log, interval) // 1000))
            elif tier.kind == "fixed":
                start, end = window(win_ms, tier, self.tz)
                state.counts[(i, start)] = state.counts.get((i, start), 0) + 1
                expires = max(expires, end)
        state.expires_ms = max(state.expires_ms, expires)

    def prune(self, scope: Scope, state: ScopeState, now_us: int) -> None:
        """Forget what no window ending at or after now can see; fold past gcra emissions."""
        now_ms = now_us // 1000
        if state.ts:
            cut = bisect_right(state.ts, now_ms - scope.keep_ms)
            if cut:
                del state.ts[:cut]
                del state.tags[:cut]
        for i, log in list(state.gcra.items()):
            tier = scope.tiers[i]
            fold(log, now_us, interval_us(tier.limit, tier.window_ms))
            if not log.floor and not log.times:
                del state.gcra[i]
        for index, start in list(state.counts):
            if window(start, scope.tiers[index], self.tz)[1] <= now_ms:
                del state.counts[(index, start)]

    def give_back(self, scope: Scope, state: ScopeState, tag: int, at: int) -> None:
        """Give back the mail tagged ``tag`` held at ``at`` (ms) in this scope's state."""
        if scope.shared and scope.has_log:  # one entry at its slot (a shared log keeps no tags)
            windows = [tier.window_ms for tier in scope.tiers]
            shared_log.remove(state.ts, state.hints, windows, at)
        for j in range(len(state.tags) - 1, -1, -1):  # this mail's entry: its tag at its slot
            if state.tags[j] == tag and state.ts[j] == at:
                del state.ts[j]
                del state.tags[j]
                break
        for i, tier in enumerate(scope.tiers):
            if tier.kind == "gcra" and i in state.gcra:
                # Listed (after now), or the floor's last when it alone made the floor.
                give_back(state.gcra[i], tag, at, interval_us(tier.limit, tier.window_ms))
            elif tier.kind == "fixed":
                # A slot stored at a window's very start may have been admitted in the last ms
                # of the window before (stored rounded up): give back nothing rather than guess.
                start = window(at, tier, self.tz)[0]
                if start != at and state.counts.get((i, start), 0) > 0:
                    state.counts[(i, start)] -= 1


def _sliding_earliest(
    scope: Scope, state: ScopeState, i: int, limit: int, t: int, *, now_us: int
) -> int:
    tier = scope.tiers[i]
    if scope.shared:
        now, hi = now_us // 1000, -(-now_us // 1000)
        ts, w, hints = state.ts, tier.window_ms, state.hints
        return earliest_insert_now(
            ts,
            limit,
            w,
            t,
            now=now,
            hi=hi,
            search=lambda x: shared_log.earliest_hinted(ts, limit, w, x, hints, (i, limit)),
        )
    n = len(state.ts)
    if n >= limit:
        return max(t, state.ts[n - limit] + tier.window_ms)
    return t


def _gcra_earliest(log: GcraLog, tier: Tier, limit: int, t: int, now_us: int) -> int:
    """Earliest ms >= ``t`` at which gcra ``tier`` admits one more: the full tier, and with a
    share (``limit`` below the tier's) a bucket of that limit (:mod:`mailer.limits.gcra_log`)."""
    now = now_us // 1000
    full = interval_us(tier.limit, tier.window_ms)
    if limit == tier.limit:
        return gcra_earliest(log.floor, log.times, tier.limit, full, t, now=now, now_us=now_us)
    part = interval_us(limit, tier.window_ms)
    base = share_floor(log.floor, now_us, full, part)
    while True:
        x = gcra_earliest(log.floor, log.times, tier.limit, full, t, now=now, now_us=now_us)
        y = gcra_earliest(base, log.times, limit, part, x, now=now, now_us=now_us)
        if y == x:
            return x
        t = y


def _gcra_room(log: GcraLog, tier: Tier, limit: int, at_us: int, now_us: int) -> int:
    full_us = interval_us(tier.limit, tier.window_ms)
    full = tier.limit - used(log.floor, log.times, full_us, at_us)
    if limit == tier.limit:
        return max(0, full)
    part_us = interval_us(limit, tier.window_ms)  # a share: its own, smaller bucket
    base = share_floor(log.floor, now_us, full_us, part_us)
    part = limit - used(base, log.times, part_us, at_us)
    return max(0, min(full, part))
