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
from typing import Any

from mailer.errors import BackendUnavailable, Contended

#: How many rounds a decision may take before it is given up as contended.
MAX_ROUNDS = 16

Call = Callable[[list[str], list[Any]], Any]
#: The tier that binds a decision: its scope's position among the mail's scopes and its 1-based
#: index in that scope; None when no tier binds (allowed, or only a hold or the order binds).
Bind = tuple[int, int] | None


class ClusterDecider:
    """Runs one decision scope by scope; see the module doc.

    ``call(keys, args)`` runs the compiled scoped script; ``now_us()`` reads the cluster's
    clock (µs) or returns a simulation's, with ``clock_arg(now_us)`` its ``ARGV[2]`` form.
    ``scopes`` are ``(key, digit)`` pairs of the mail's present scopes, recipient first.
    """

    def __init__(self, call: Call, url: str) -> None:
        self._script = call
        self._url = url

    def _call(self, keys: list[str], args: list[Any], months: str) -> Any:
        """One script call; with calendar-month tiers, their window starts as ``ARGV[10]``."""
        if months:  # ARGV[8] and [9] padded (0: no not_before, "": no slot)
            args = [*args, *[0, ""][len(args) - 7 :], months]
        return self._script(keys, args)

    def acquire(
        self,
        scopes: Sequence[tuple[str, str]],
        clock: str,
        *,
        tag: int,
        wait_ms: int,
        share: str,
        offset: int,
        not_before: int,
        months: str = "",
    ) -> tuple[list[Any], Bind]:
        """Reserve the mail in every scope at one slot; return the replies and the binding
        ``(scope position, tier index)`` (None: no tier binds).

        A refusal returns replies whose last is neither allowed nor booked, its slot the
        earliest all scopes admit; nothing is left reserved. A mail already holding a slot
        gets that slot's answer from every scope (mode ``h``).
        """
        if tag:
            first, digit = scopes[0]
            held = self._call([first], ["q", clock, tag, 0, share, offset, digit], months)
            if held:  # the same mail asked again: its slot, nothing more consumed
                return [
                    self._call(
                        [key], ["h", clock, tag, 0, share, offset, digit, 0, int(held)], months
                    )
                    for key, digit in scopes
                ], None
        now = _now_us(clock) // 1000
        t = max(not_before, now)
        for _ in range(MAX_ROUNDS):
            later = t
            replies, bind, t = self._converge(scopes, clock, share, offset, t, months)
            if t > now and t - now > wait_ms:
                return replies, bind  # refused: nothing was written
            reserved: list[tuple[str, str, int]] = []  # key, digit, the slot it is stored at
            booked: list[Any] = []
            for key, digit in scopes:
                raw = self._call([key], ["b", clock, tag, wait_ms, share, offset, digit, t], months)
                if not raw[0] and not raw[1]:  # taken meanwhile: give back, decide again
                    later = int(raw[2])
                    break
                stored = int(raw[2]) if raw[1] else -(-_now_us(clock) // 1000)
                reserved.append((key, digit, stored))
                if raw[2] != t:  # a later slot here (another mail took t meanwhile)
                    later = int(raw[2])
                    break
                booked.append(raw)
            if len(booked) == len(scopes):
                return booked, bind
            self._give_back(reserved, clock, tag, offset, months)
            t = max(t, later)
        raise Contended(
            f"the scoped decision found no common slot in {MAX_ROUNDS} rounds; nothing is held"
        )

    def peek(
        self,
        scopes: Sequence[tuple[str, str]],
        clock: str,
        share: str,
        offset: int,
        months: str = "",
    ) -> tuple[list[Any], Bind]:
        """Answer as :meth:`acquire` would for a fresh mail, consuming nothing."""
        now = _now_us(clock) // 1000
        replies, bind, _ = self._converge(scopes, clock, share, offset, now, months)
        return replies, bind

    def _converge(  # noqa: PLR0917 - one decision's inputs
        self,
        scopes: Sequence[tuple[str, str]],
        clock: str,
        share: str,
        offset: int,
        t: int,
        months: str,
    ) -> tuple[list[Any], Bind, int]:
        """Peek every scope at ``not_before = t`` until all answer the same slot: the earliest
        time every scope admits (``t`` only grows). Returns the last round's replies, the tier
        that last raised ``t``, and the slot."""
        bind: Bind = None
        for _ in range(MAX_ROUNDS):
            replies = []
            moved = False
            for position, (key, digit) in enumerate(scopes):
                raw = self._call([key], ["p", clock, 0, 0, share, offset, digit, t], months)
                replies.append(raw)
                if int(raw[2]) > t:  # the last to raise t binds (None: the order of bookings)
                    t, moved = int(raw[2]), True
                    bind = (position, int(raw[5])) if raw[4] else None
            if not moved or all(int(raw[2]) == t for raw in replies):
                return replies, bind, t
        raise BackendUnavailable(
            self._url, RuntimeError(f"scoped peek did not settle in {MAX_ROUNDS} rounds")
        )

    def release(
        self,
        scopes: Sequence[tuple[str, str]],
        clock: str,
        tag: int,
        offset: int,
        months: str = "",
    ) -> bool:
        """Give the mail's slot back in every scope, the recipient's last; whether it held one."""
        key, digit = scopes[0]
        at = self._call([key], ["q", clock, tag, 0, "1", offset, digit], months)
        if not at:
            return False
        for key, digit in [*scopes[1:], scopes[0]]:
            self._call([key], ["r", clock, tag, 0, "1", offset, digit, 0, int(at)], months)
        return True

    def _give_back(
        self, reserved: list[tuple[str, str, int]], clock: str, tag: int, offset: int, months: str
    ) -> None:
        for key, digit, stored in reversed(reserved):
            self._call([key], ["r", clock, tag, 0, "1", offset, digit, 0, stored], months)


def _now_us(clock: str) -> int:
    return int(clock[1:]) if clock.startswith("t") else int(clock)


def _stored_now(clock: str) -> int:
    """The ms an admission now is stored at: now rounded up (never early)."""
    return -(-_now_us(clock) // 1000)
