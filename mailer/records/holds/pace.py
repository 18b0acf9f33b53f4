"""The sender's pace after a hold: a learned rate, so that held mails resume as a slow start,
not as a herd at the hold's end.

When the sender is held (a throttling reply), a pace starts at the hold's end: the first mails
go one at a time, ``start`` mails/s; the rate then grows by ``step`` mails/s every second while
mail is sent and no throttling reply comes (additive increase). At the next one, the mails
accepted in the last window (``MAILGUARD_PACE_WINDOW``) before it are the relay's count per
window: the pace then sends that many per window (plus :data:`MARGIN`), no longer growing;
with nothing accepted before it the rate halves (multiplicative decrease). Either way the
refused mail is booked at the pace's next slot instead of holding every worker again; a
learned count outlives the pace (:data:`LEARNED_FOR`), and the next pace starts from it. A
configured ``sender:`` tier bounds the rate (``cap``): once the rate reaches it, the pace ends
and the tier paces alone. Without a tier the pace ends :data:`FORGET_AFTER`
seconds after its last change.

The pace gives **slots** (epoch seconds on the holds' clock) one after the other, each
``1 / rate`` after the one before at the rate of that moment; a mail given a slot in the future
is booked there and holds it (a reservation by mail id): when it runs at its slot it goes, with
no new slot. A slow-down forgets the reservations, so mails booked under the faster plan take a
new slot when they run.

Stored next to the holds: ``<namespace>:pace:{sender}`` (JSON ``{rate, since, next, step, cap,
level, quota, window, given, idle}``), ``<namespace>:pace:{sender}:slots`` (a hash, mail tag ->
slot) and ``<namespace>:pace:{sender}:learned`` (JSON ``{quota, window, until}``); memory:
:class:`MemoryPaceStore`; Redis: :class:`~mailer.records.holds.pace_redis.RedisPaceStore`
(``lua/pace.lua``, one atomic step per call).

>>> pace = start_pace(100.0, rate=1.0, step=0.5, cap=0.0)
>>> slot, pace = take_slot(pace, 99.0); slot, pace.next
(100.0, 101.0)
>>> round(pace.rate_at(104.0), 3)
3.0
>>> slow_pace(pace, 104.0, asked=103.0).rate
1.5
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field, replace
from typing import Protocol

from mailer.clock import Clock, system_clock
from mailer.defaults import PACE_WINDOW
from mailer.limits.policy import Policy

#: The lowest rate a slow-down leaves, in mails/s.
FLOOR = 0.05
#: How long a pace lasts after its last change (start or slow-down) without a ``cap``, seconds.
FORGET_AFTER = 600.0
#: The first rate after a hold, in mails/s: one at a time.
PACE_START = 1.0
#: The additive increase, in mails/s gained per second without a throttling reply.
PACE_STEP = 0.5
#: A learned plan spreads the count over this many windows (a margin for the two clocks).
MARGIN = 1.1
#: How long a learned count per window outlives its pace, seconds: a day.
LEARNED_FOR = 86400.0
#: The most slots a pace remembers for counting, the latest kept.
GIVEN_MAX = 200


@dataclass(frozen=True)
class Pace:
    """A learned sender rate: ``rate`` mails/s at ``since`` (epoch seconds), growing by
    ``step`` mails/s per second, bounded by ``cap`` (0: none); ``next`` is the earliest slot not
    yet given; ``level`` how many times it was halved. ``written``: True on the pace a store's
    ``slow`` answers when that call halved it (of refusals at once, one halves it); not stored,
    not compared."""

    rate: float
    since: float
    next: float
    step: float
    cap: float = 0.0
    level: int = 0
    written: bool = field(default=False, compare=False)
    #: the learned count per ``window`` seconds (0: none learned; the rate then grows).
    quota: int = 0
    window: float = 0.0
    #: the slots given since ``since`` (the latest :data:`GIVEN_MAX`), epoch seconds.
    given: tuple[float, ...] = ()
    #: seconds since ``since`` in which no mail asked for a slot (they do not grow the rate).
    idle: float = 0.0

    def rate_at(self, t: float) -> float:
        """The rate at ``t``, in mails/s (the one at ``since`` before then); only the seconds
        in which mail was sent (not ``idle``) grow it."""
        rate = self.rate + self.step * max(t - self.since - self.idle, 0.0)
        return min(rate, self.cap) if self.cap else rate

    def over(self, now: float) -> bool:
        """Whether the pace has ended at ``now``: its rate reached ``cap``, or (no cap) it has
        not changed for :data:`FORGET_AFTER` seconds."""
        if self.cap:
            return self.rate_at(now) >= self.cap
        return now - self.since > FORGET_AFTER


def start_pace(at: float, *, rate: float, step: float, cap: float) -> Pace:
    """A pace whose first slot is ``at`` (a hold's end), at ``rate`` mails/s growing by
    ``step`` per second, bounded by ``cap`` (0: none)."""
    if not rate > 0 or step < 0 or cap < 0:
        raise ValueError(f"a pace needs rate > 0, step >= 0, cap >= 0, got {rate}, {step}, {cap}")
    return Pace(rate=rate if not cap else min(rate, cap), since=at, next=at, step=step, cap=cap)


def take_slot(pace: Pace, now: float) -> tuple[float, Pace]:
    """The next slot (epoch seconds, at or after ``now``) and the pace after giving it: the
    slot after it comes ``1 / rate`` later, at the rate of this slot."""
    slot = max(now, pace.next)
    idle = pace.idle + max(now - pace.next, 0.0)
    given = (*pace.given, slot)[-GIVEN_MAX:]
    paced = replace(pace, idle=idle, given=given)
    return slot, replace(paced, next=slot + 1.0 / paced.rate_at(slot))


def slow_pace(pace: Pace, now: float, asked: float, window: float = 0.0) -> Pace:
    """The pace after a throttling reply at ``now`` to a send admitted at ``asked``.

    With a ``window`` (seconds, the relay's), the mails accepted in the last ``window`` before
    the reply (the slots given since the last change up to ``now``, less the refused one) are
    the relay's count per window: from then on the pace sends that many per
    ``window * MARGIN``, spread, the first a window after the first one counted, and no longer
    grows. Nothing counted: a
    learned rate is kept, its next slot ``1 / rate`` from now; else the rate halves (never
    below :data:`FLOOR`). A reply to a send admitted before the last change
    (``asked < since``) was answered already: ``pace`` as it is."""
    if asked < pace.since:
        return pace
    counted = [slot for slot in pace.given if now - window <= slot <= now] if window > 0 else []
    level = pace.level + 1
    if len(counted) > 1:
        quota, span = len(counted) - 1, window * MARGIN
        rate = quota / span
        first = max(counted[0] + span, now)
        return Pace(
            rate=rate, since=now, next=first, step=0.0, cap=pace.cap, level=level,
            quota=quota, window=window,
        )  # fmt: skip
    rate = pace.rate_at(now) if pace.quota else max(pace.rate_at(now) / 2.0, FLOOR)
    return replace(
        pace, rate=rate, since=now, next=now + 1.0 / rate, level=level, given=(), idle=0.0
    )


def learned_pace(pace: Pace, quota: int, window: float) -> Pace:
    """``pace`` (a new one) starting from a count of ``quota`` mails per ``window`` seconds
    learned before: that many per ``window * MARGIN``, not growing (bounded by its cap)."""
    rate = quota / (window * MARGIN)
    rate = min(rate, pace.cap) if pace.cap else rate
    return replace(pace, rate=rate, step=0.0, quota=quota, window=window)


def sender_cap(policy: Policy) -> float:
    """The slowest rate a ``sender:`` tier of ``policy`` allows, in mails/s (0: no such tier)."""
    tiers = [t for scope, kept in policy.scopes if scope == "sender" for t in kept]
    rates = [t.limit / t.window for t in tiers]
    return min(rates) if rates else 0.0


def provider_cap(policy: Policy, name: str) -> float:
    """The slowest rate ``policy``'s tiers allow mail to provider ``name``, in mails/s: its
    ``sender:``, ``provider:`` and ``provider <name>:`` tiers (0: none)."""
    scopes = ("sender", "provider", f"provider {name}")
    rates = [t.limit / t.window for scope, kept in policy.scopes if scope in scopes for t in kept]
    return min(rates) if rates else 0.0


def encode_pace(pace: Pace) -> str:
    return json.dumps(
        {
            "rate": pace.rate,
            "since": pace.since,
            "next": pace.next,
            "step": pace.step,
            "cap": pace.cap,
            "level": pace.level,
            "quota": pace.quota,
            "window": pace.window,
            "given": list(pace.given),
            "idle": pace.idle,
        }
    )


def decode_pace(raw: bytes | str | None) -> Pace | None:
    """A pace from its stored JSON; None for no value."""
    if raw is None:
        return None
    data = json.loads(raw)
    return Pace(
        rate=float(data["rate"]),
        since=float(data["since"]),
        next=float(data["next"]),
        step=float(data["step"]),
        cap=float(data["cap"]),
        level=int(data["level"]),
        quota=int(data.get("quota", 0)),
        window=float(data.get("window", 0.0)),
        given=tuple(float(slot) for slot in data.get("given") or ()),
        idle=float(data.get("idle", 0.0)),
    )


class PaceStore(Protocol):
    """Where the pace lives; every method one atomic step."""

    def start(self, key: str, pace: Pace) -> Pace:
        """Set the pace at ``key`` (forgetting the one there and its reservations), from the
        count per window learned there within :data:`LEARNED_FOR` if any
        (:func:`learned_pace`); the pace set."""
        ...

    def take(self, key: str, tag: str, now: float) -> tuple[float, Pace] | None:
        """The slot of mail ``tag``: the one it holds, else the next (held by it when in the
        future; a held slot at or before ``now`` is given up as it is used). None when no pace
        is in force (one that is over is deleted)."""
        ...

    def slow(self, key: str, now: float, asked: float, window: float = 0.0) -> Pace | None:
        """:func:`slow_pace` of the pace at ``key``, forgetting the reservations when it
        changed (then ``written``) and keeping a count it learned for :data:`LEARNED_FOR`;
        None when no pace is in force."""
        ...

    def get(self, key: str) -> Pace | None: ...

    def get_many(self, keys: list[str]) -> list[Pace | None]:
        """The paces stored at ``keys`` (one round trip: the keys of one relay share a Cluster
        slot), in force or not."""
        ...


class MemoryPaceStore:
    """:class:`PaceStore` in this process (tests, the demo, a threads or solo pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paces: dict[str, Pace] = {}
        self._slots: dict[str, dict[str, float]] = {}
        self._learned: dict[str, tuple[int, float, float]] = {}  # quota, window, until

    def start(self, key: str, pace: Pace) -> Pace:
        with self._lock:
            learned = self._learned.get(key)
            if learned is not None and learned[2] > pace.since:
                pace = learned_pace(pace, learned[0], learned[1])
            self._paces[key] = pace
            self._slots.pop(key, None)
            return pace

    def take(self, key: str, tag: str, now: float) -> tuple[float, Pace] | None:
        with self._lock:
            pace = self._paces.get(key)
            if pace is None or pace.over(now):
                self._paces.pop(key, None)
                self._slots.pop(key, None)
                return None
            slots = self._slots.setdefault(key, {})
            held = slots.get(tag)
            if held is not None:
                if held <= now:
                    del slots[tag]
                return held, pace
            slot, pace = take_slot(pace, now)
            self._paces[key] = pace
            if slot > now:
                slots[tag] = slot
            return slot, pace

    def slow(self, key: str, now: float, asked: float, window: float = 0.0) -> Pace | None:
        with self._lock:
            pace = self._paces.get(key)
            if pace is None:
                return None
            slowed = slow_pace(pace, now, asked, window)
            if slowed is pace:
                return pace
            self._paces[key] = slowed
            self._slots.pop(key, None)
            if slowed.quota:
                self._learned[key] = (slowed.quota, slowed.window, now + LEARNED_FOR)
            return replace(slowed, written=True)

    def get(self, key: str) -> Pace | None:
        with self._lock:
            return self._paces.get(key)

    def get_many(self, keys: list[str]) -> list[Pace | None]:
        with self._lock:
            return [self._paces.get(key) for key in keys]


class SenderPace:
    """The sender's pace as the guard uses it: its keys and the holds' clock over a
    :class:`PaceStore`. ``rate`` None turns the slow start off (holds end in one go).

    ``key``: where it lives, ``<namespace>:pace:{sender}`` unless given (the holds give one per
    relay, ``<namespace>:pace:{<relay's keyed hash>}``, and one per relay and provider, that key
    with ``:<provider>``: :class:`~mailer.records.holds.Holds`)."""

    def __init__(
        self,
        store: PaceStore,
        *,
        namespace: str = "mailguard",
        clock: Clock | None = None,
        rate: float | None = PACE_START,
        step: float = PACE_STEP,
        window: float = PACE_WINDOW,
        key: str | None = None,
    ) -> None:
        self._store = store
        #: Where the pace lives (shared by :meth:`beside`'s paces).
        self.store = store
        # one Cluster slot with its reservations and learned count (the hash tag)
        self.key = key or f"{namespace}:pace:{{sender}}"
        self._clock = clock or system_clock
        self.rate = rate
        self.step = step
        self.window = window

    def start(self, at: float, cap: float) -> Pace | None:
        """Start the slow start at ``at`` (a hold's end), bounded by ``cap`` mails/s (0: none);
        None when the slow start is off."""
        if self.rate is None:
            return None
        return self._store.start(self.key, start_pace(at, rate=self.rate, step=self.step, cap=cap))

    def take(self, tag: str) -> tuple[float, Pace] | None:
        """Mail ``tag``'s slot (see :meth:`PaceStore.take`); None: no pace in force."""
        return self._store.take(self.key, tag, self._clock())

    def slow(self, asked: float) -> Pace | None:
        """Slow the pace after a throttling reply to a send admitted at ``asked``
        (:func:`slow_pace` over :attr:`window`); None: no pace in force."""
        return self._store.slow(self.key, self._clock(), asked, self.window)

    def beside(self, key: str) -> SenderPace:
        """Another pace on the same store, clock and settings, at ``key``."""
        return SenderPace(
            self._store, clock=self._clock, rate=self.rate, step=self.step, window=self.window,
            key=key,
        )  # fmt: skip

    def current(self) -> Pace | None:
        """The pace in force now, or None."""
        pace = self._store.get(self.key)
        return None if pace is None or pace.over(self._clock()) else pace

    def rate_now(self) -> float:
        """The learned rate now, in mails/s; 0 when no pace is in force."""
        pace = self.current()
        return 0.0 if pace is None else pace.rate_at(self._clock())
