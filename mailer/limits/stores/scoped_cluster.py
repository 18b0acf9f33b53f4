"""The scoped decision on Redis Cluster: scope by scope, in a fixed order, rolled back on refusal.

On one Redis a scoped decision is one script call over every scope's keys. On a Cluster the
recipient's, the domain's, the sender's and a tenant's keys live in different slots, and a
script may only touch one slot, so :class:`ClusterDecider` runs the same script once per
scope (``ARGV[7]`` names that one scope), in the policy's order (recipient, domain, sender,
tenant), and coordinates:

1. One clock: the cluster's ``TIME`` is read once and given to every call (``"t<µs>"``), so all
   scopes decide at the same now.
2. First the slot is found without writing: every scope is peeked with ``not_before = t``
   (mode ``p``), ``t`` raised to the latest answer, until all scopes answer the same ``t``: the
   earliest time every scope admits, as the one-Redis script finds it (each scope's answer is
   its own earliest time at or after ``t``, and only grows with ``t``). Past ``max_wait`` the
   mail is refused there, with nothing written.
3. Then the mail is reserved in each scope at exactly ``t`` (``not_before = t``). Alone, every
   scope books ``t``; when a concurrent mail took it meanwhile, a scope answers a later slot or
   refuses: what was reserved is given back and the decision starts again from step 2, at that
   later slot (nothing earlier can have freed up but by a release, so no round repeats the
   last). After :data:`MAX_ROUNDS` such rounds it raises :class:`~mailer.errors.Contended`
   with nothing held, which the guard defers with a short backoff (never sent unguarded).
4. The mail's id (tag) is first looked up in the recipient's log (mode ``q``): a mail that
   holds a slot gets it back and consumes nothing, as on one Redis.

**Why it is never over.** Each call is the one-Redis script on one scope: it reserves only what
that scope's tiers admit at the reserved time, atomically, as an ordinary booking. Every scope
therefore holds, at every moment, only reservations its own tiers allowed; giving one back only
frees room. A mail leaves only when every scope holds it at the same ``t``. What is lost is
atomicity *across* scopes: while a round holds a reservation it will roll back, another mail may
be refused or booked later than it had to be (never earlier than its scopes allow), and a
worker killed mid-round leaves a reservation that is never used (it ages out with its window,
like a booking of a mail that failed). Without concurrency no round is rolled back, so the
decisions are those of one Redis (the tests replay random traces against the memory limiter).
Rolling back a gcra tier gives back only the bucket's latest emission (as ``release`` does), so
a rollback never credits the future.

Costs: one ``TIME``, the tag lookup, one peek per scope per converging round (usually one or
two) and one reservation per scope: about 10 round trips for a mail with all four scopes,
where one Redis needs 1. The price of spreading scopes over a Cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mailer.errors import BackendUnavailable, Contended
from mailer.limits.decision import Decision
from mailer.limits.policy import Tier

#: How many rounds a decision may take before it is given up as contended.
MAX_ROUNDS = 16

Call = Callable[[list[str], list[Any]], Any]
#: The tier that binds a decision: its scope's position among the mail's scopes and its 1-based
#: index in that scope; None when no tier binds (allowed, or only a hold or the order binds).
Bind = tuple[int, int] | None


@dataclass(frozen=True)
class Asked:
    """What every call of one decision shares: the mail's present scopes as ``(key, digit)``
    pairs (recipient first), the clock argument (``"t<µs>"`` or a given µs), the share
    (``ARGV[5]``), the time zone offset (ms) and the calendar-month window starts."""

    scopes: Sequence[tuple[str, str]]
    clock: str
    share: str
    offset: int
    months: str = ""

    @property
    def now_ms(self) -> int:
        """The decision's now, in ms (rounded down)."""
        us = int(self.clock[1:]) if self.clock.startswith("t") else int(self.clock)
        return us // 1000


class ClusterDecider:
    """Runs one decision scope by scope; see the module doc.

    ``call(keys, args)`` runs the compiled scoped script on the one slot of ``keys``.
    """

    def __init__(self, call: Call, url: str) -> None:
        self._script = call
        self._url = url

    def decide(
        self,
        mode: str,
        asked: Asked,
        *,
        tag: int = 0,
        max_wait_ms: int = 0,
        not_before: int = 0,
        tiers: Sequence[tuple[str, tuple[Tier, ...]]] = (),
    ) -> Decision | int:
        """One decision in ``mode`` (``a`` acquire, ``p`` peek, ``r`` release: 1 or 0).

        ``tiers`` are the present scopes' ``(name, tiers)``, in the order of ``asked.scopes``.
        """
        if mode == "r":
            return int(self.release(asked, tag))
        if mode == "p":
            replies, bind = self.peek(asked)
        else:
            replies, bind = self.acquire(
                asked, tag=tag, max_wait_ms=max_wait_ms, not_before=not_before
            )
        last = replies[-1]
        remaining = tuple(value for raw in replies for value in raw[6:])
        now = asked.now_ms
        if bind is not None and not bind[1]:  # a shared scope's key is full: refused at the slot
            at = max(int(raw[2]) for raw in replies)
            return Decision(False, False, at, max(0, at - now), None, remaining, tiers[bind[0]][0])
        if not last[0] and not last[1]:  # refused (peek: not now): the last scope says when
            allowed = booked = False
            at = int(last[2])
            wait_ms = at - now
        else:
            allowed = all(raw[0] == 1 for raw in replies)
            booked = not allowed
            at = max(int(raw[2]) for raw in replies)
            wait_ms = 0 if allowed else at - now
        if bind is not None and not allowed:
            name, scope_tiers = tiers[bind[0]]
            tier = scope_tiers[bind[1] - 1] if bind[1] else None  # none: the scope's key is full
            return Decision(allowed, booked, at, wait_ms, tier, remaining, name)
        return Decision(allowed, booked, at, wait_ms, None, remaining, None)

    def _call(self, key: str, args: list[Any], months: str) -> Any:
        """One script call; with calendar-month tiers, their window starts as ``ARGV[10]``."""
        if months:  # ARGV[8] and [9] padded (0: no not_before, "": no slot)
            args = [*args, *[0, ""][len(args) - 7 :], months]
        return self._script([key], args)

    def _args(self, asked: Asked, mode: str, digit: str, *more: Any) -> list[Any]:
        return [mode, asked.clock, *more[:2], asked.share, asked.offset, digit, *more[2:]]

    def acquire(
        self, asked: Asked, *, tag: int, max_wait_ms: int, not_before: int
    ) -> tuple[list[Any], Bind]:
        """Reserve the mail in every scope at one slot; return the replies and the binding
        ``(scope position, tier index)`` (None: no tier binds).

        A refusal returns replies whose last is neither allowed nor booked, its slot the
        earliest all scopes admit; nothing is left reserved. A mail already holding a slot
        gets that slot's answer from every scope (mode ``h``).
        """
        if tag:
            held = self._held(asked, tag)
            if held:  # the same mail asked again: its slot, nothing more consumed
                return [
                    self._call(key, self._args(asked, "h", digit, tag, 0, 0, held), asked.months)
                    for key, digit in asked.scopes
                ], None
        now = asked.now_ms
        t = max(not_before, now)
        for _ in range(MAX_ROUNDS):
            replies, bind, t = self._converge(asked, t)
            if t > now and t - now > max_wait_ms:
                return replies, bind  # refused: nothing was written
            booked, reserved, later = self._reserve(asked, t, tag=tag, max_wait_ms=max_wait_ms)
            if len(booked) == len(asked.scopes):
                return booked, bind
            self._give_back(asked, reserved, tag)
            if isinstance(later, list):  # a shared scope's key is full: refused, as on one Redis
                return self._converge(asked, t)[0], (len(booked), 0)
            t = max(t, later)
        raise Contended(
            f"the scoped decision found no common slot in {MAX_ROUNDS} rounds; nothing is held"
        )

    def _held(self, asked: Asked, tag: int) -> int:
        """The slot (ms) the mail tagged ``tag`` holds in the recipient's log, else 0."""
        first, digit = asked.scopes[0]
        return int(self._call(first, self._args(asked, "q", digit, tag, 0), asked.months))

    def _reserve(
        self, asked: Asked, t: int, *, tag: int, max_wait_ms: int
    ) -> tuple[list[Any], list[tuple[str, str, int]], int | list[Any]]:
        """Book ``t`` scope by scope; stop at the first scope that answers otherwise. Returns
        the replies of the scopes that booked ``t``, every reservation made (key, digit, the
        slot it is stored at) and the later slot a scope answered (``t`` if none), or the reply
        of a scope that refused because its key is full (``MAX_BOOKINGS``: no tier named)."""
        reserved: list[tuple[str, str, int]] = []
        booked: list[Any] = []
        for key, digit in asked.scopes:
            raw = self._call(key, self._args(asked, "b", digit, tag, max_wait_ms, t), asked.months)
            if not raw[0] and not raw[1] and raw[4] and not raw[5]:
                return booked, reserved, list(raw)
            if not raw[0] and not raw[1]:  # taken meanwhile: give back, decide again
                return booked, reserved, int(raw[2])
            stored = int(raw[2]) if raw[1] else -(-self._now_us(asked) // 1000)
            reserved.append((key, digit, stored))
            if raw[2] != t:  # a later slot here (another mail took t meanwhile)
                return booked, reserved, int(raw[2])
            booked.append(raw)
        return booked, reserved, t

    @staticmethod
    def _now_us(asked: Asked) -> int:
        clock = asked.clock
        return int(clock[1:]) if clock.startswith("t") else int(clock)

    def peek(self, asked: Asked) -> tuple[list[Any], Bind]:
        """Answer as :meth:`acquire` would for a fresh mail, consuming nothing."""
        replies, bind, _ = self._converge(asked, asked.now_ms)
        return replies, bind

    def _converge(self, asked: Asked, t: int) -> tuple[list[Any], Bind, int]:
        """Peek every scope at ``not_before = t`` until all answer the same slot: the earliest
        time every scope admits (``t`` only grows). Returns the last round's replies, the tier
        that last raised ``t``, and the slot."""
        bind: Bind = None
        for _ in range(MAX_ROUNDS):
            replies = []
            moved = False
            for position, (key, digit) in enumerate(asked.scopes):
                raw = self._call(key, self._args(asked, "p", digit, 0, 0, t), asked.months)
                replies.append(raw)
                if int(raw[2]) > t:  # the last to raise t binds (None: the order of bookings)
                    t, moved = int(raw[2]), True
                    bind = (position, int(raw[5])) if raw[4] else None
            if not moved or all(int(raw[2]) == t for raw in replies):
                return replies, bind, t
        raise BackendUnavailable(
            self._url, RuntimeError(f"scoped peek did not settle in {MAX_ROUNDS} rounds")
        )

    def release(self, asked: Asked, tag: int) -> bool:
        """Give the mail's slot back in every scope, the recipient's last; whether it held one.

        ``asked.share`` should be ``"1"``: a release gives back whatever the share."""
        at = self._held(asked, tag)
        if not at:
            return False
        for key, digit in [*asked.scopes[1:], asked.scopes[0]]:
            self._call(key, self._args(asked, "r", digit, tag, 0, 0, at), asked.months)
        return True

    def _give_back(self, asked: Asked, reserved: list[tuple[str, str, int]], tag: int) -> None:
        whole = replace(asked, share="1")  # a release gives back whatever the share
        for key, digit, stored in reversed(reserved):
            self._call(key, self._args(whole, "r", digit, tag, 0, 0, stored), asked.months)
