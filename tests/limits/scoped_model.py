"""A brute-force model of the scoped limiter's contract, the oracle of ``test_scoped_properties``.

The contract (``mailer/scoped.py``): a mail is admitted at the earliest ms ``x`` (not before now
rounded down, nor before the newest entry of its recipient's log; shared scopes' sliding tiers
take it by insertion, before later bookings) at which every tier of
every scope it has a key in has room, counting its kind's share in the shared scopes; admitted
now it is stored at now rounded up, booked at ``x``; a refusal consumes nothing; the same mail
id gets its slot back; ``release`` gives it back everywhere.

It keeps every admission (minus releases) with its subjects and finds the answer by trying
candidate times and counting, so it shares no shortcut with the implementation (no
``ts[n-L] + W``, no pruning, no bucket: a gcra tier is every span of its emissions counted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timezone

from mailer.limits.policy import Policy, Tier
from mailer.limits.windows import window

SHARED = ("domain", "sender", "tenant")


def _shared(scope: str) -> bool:
    """Whether ``scope`` is shared: domain, sender, tenant, and every provider scope."""
    return scope in SHARED or scope.split(" ", maxsplit=1)[0] == "provider"


@dataclass
class Admission:
    stored_ms: int  # the ms the limiter stores (now rounded up, or the booked slot)
    real_us: int  # when the mail may really go (now, or the booked slot)
    window_ms: int  # the ms whose calendar window counts it
    mail_id: str | None
    subjects: dict[str, str]


@dataclass
class Answer:
    allowed: bool
    booked: bool
    at_ms: int
    wait_ms: int


@dataclass
class ScopedModel:
    policy: Policy
    admissions: list[Admission] = field(default_factory=list)
    #: Fixed-window counts a release did not give back: (scope, subject, tier, start) -> n.
    ghosts: dict[tuple[str, str, Tier, int], int] = field(default_factory=dict)
    #: GCRA emissions (µs) a release could not take back (they were not after now), per tier.
    spent: dict[tuple[str, str, Tier], list[int]] = field(default_factory=dict)

    def _limit(self, scope: str, tier: Tier, share: float) -> int:
        return max(1, math.floor(tier.limit * share + 1e-9)) if _shared(scope) else tier.limit

    def _mine(self, scope: str, subject: str) -> list[Admission]:
        return [a for a in self.admissions if a.subjects.get(scope) == subject]

    def _fits(  # noqa: PLR0917 - one tier's question
        self, scope: str, subject: str, tier: Tier, x: int, share: float, now_us: int
    ) -> bool:
        mine = self._mine(scope, subject)
        limit = self._limit(scope, tier, share)
        if tier.kind == "sliding" and _shared(scope):
            # inserted: every window of W ms holding x has room; a mail now is stored at now
            # rounded up, so it must fit seen from now (before it) and from there (after it)
            stored = [a.stored_ms for a in mine]
            now, hi = now_us // 1000, -(-now_us // 1000)
            if x != now or hi == now:
                return _window_room(stored, x, tier.window_ms, limit)
            # seen from now, an entry stored at now rounded up may be an admission of this ms
            seen_now = [now if s == hi else s for s in stored]
            return _window_room(seen_now, now, tier.window_ms, limit) and _window_room(
                stored, hi, tier.window_ms, limit
            )
        if tier.kind == "sliding":
            # entries after x (up to now rounded up) are in every window a new entry joins
            return sum(1 for a in mine if x - tier.window_ms < a.stored_ms) < limit
        if tier.kind == "fixed":
            start = window(x, tier, timezone.utc)[0]
            count = sum(1 for a in mine if window(a.window_ms, tier, timezone.utc)[0] == start)
            return count + self.ghosts.get((scope, subject, tier, start), 0) < limit
        # gcra: every span of emissions holding x keeps the tier; a kind with a share also
        # keeps a bucket of its limit, refilled at its limit per W, where the tokens the past
        # holds in the full bucket count token for token
        times = self._emissions(scope, subject, tier)
        x_us = now_us if x == now_us // 1000 else x * 1000  # "now": the real time
        full = _interval(tier.limit, tier.window_ms)
        ok = _spans_keep(times, x_us, tier.limit, full)
        if limit < tier.limit:
            part = _interval(limit, tier.window_ms)
            base = _share_base(times, now_us, full, part)
            later = [e for e in times if e > now_us]
            ok = ok and _spans_keep(later, x_us, limit, part, base)
        return ok

    def _emissions(self, scope: str, subject: str, tier: Tier) -> list[int]:
        """A gcra tier's emissions (µs): every admission kept and every one spent."""
        mine = [a.real_us for a in self._mine(scope, subject)]
        return mine + self.spent.get((scope, subject, tier), [])

    def _record(self, admission: Admission) -> None:
        self.admissions.append(admission)

    def acquire(  # noqa: PLR0912 - one branch per rule of the contract
        self,
        now_us: int,
        subjects: dict[str, str],
        mail_id: str | None,
        max_wait_ms: int,
        share: float,
    ) -> Answer:
        now = now_us // 1000
        keep = max(t.window_ms for _, tiers in self.policy.scope_tiers() for t in tiers)
        if mail_id is not None:
            for a in self.admissions:
                same = a.subjects["recipient"] == subjects["recipient"]
                if same and a.mail_id == mail_id and a.stored_ms > now - keep:
                    allowed = a.stored_ms <= -(-now_us // 1000)
                    wait = 0 if allowed else a.stored_ms - now
                    return Answer(allowed, not allowed, a.stored_ms, wait)
        scopes = [(s, t) for s, t in self.policy.scope_tiers() if subjects.get(s)]
        low = now
        for a in self._mine("recipient", subjects["recipient"]):  # its mails keep their order
            if a.stored_ms > -(-now_us // 1000):  # up to now rounded up: no delay
                low = max(low, a.stored_ms)
        candidates = {low, -(-now_us // 1000)}  # now rounded up: the next ms a mail may go
        for a in self.admissions:
            for _, tiers in scopes:
                for tier in tiers:
                    candidates.add(a.stored_ms + tier.window_ms)
                    if tier.kind == "fixed":
                        candidates.add(window(a.window_ms, tier, timezone.utc)[1])
                    if tier.kind == "gcra":
                        candidates |= _gcra_candidates(a.real_us, tier, share, len(self.admissions))
        for scope, tiers in scopes:  # a share's bucket starts from the past's tokens
            for tier in tiers:
                limit = self._limit(scope, tier, share)
                if tier.kind == "gcra" and limit < tier.limit:
                    times = self._emissions(scope, subjects[scope], tier)
                    full, part = (
                        _interval(tier.limit, tier.window_ms),
                        _interval(limit, tier.window_ms),
                    )
                    base = _share_base(times, now_us, full, part)
                    if base:
                        for k in range(-limit, len(self.admissions) + 2):
                            candidates.add(-(-(base + k * part) // 1000))
        for scope, subject, tier, start in self.ghosts:  # a count a release left behind
            if subjects.get(scope) == subject:
                candidates.add(window(start, tier, timezone.utc)[1])
        for (scope, subject, tier), spent in self.spent.items():
            if subjects.get(scope) == subject:
                for e in spent:
                    candidates |= _gcra_candidates(e, tier, share, len(self.admissions))
        x = min(
            c
            for c in candidates
            if c >= low
            and all(
                self._fits(scope, subjects[scope], tier, c, share, now_us)
                for scope, tiers in scopes
                for tier in tiers
            )
        )
        if x == now:
            self._record(Admission(-(-now_us // 1000), now_us, now, mail_id, subjects))
            return Answer(True, False, now, 0)
        if x - now <= max_wait_ms:
            self._record(Admission(x, x * 1000, x, mail_id, subjects))
            return Answer(False, True, x, x - now)
        return Answer(False, False, x, x - now)

    def release(self, now_us: int, recipient: str, mail_id: str) -> bool:
        keep = max(t.window_ms for _, tiers in self.policy.scope_tiers() for t in tiers)
        for i, a in enumerate(self.admissions):
            if (
                a.subjects["recipient"] == recipient
                and a.mail_id == mail_id
                and a.stored_ms > now_us // 1000 - keep
            ):
                del self.admissions[i]
                self._give_back(now_us, a)
                return True
        return False

    def _give_back(self, now_us: int, a: Admission) -> None:
        for scope, tiers in self.policy.scope_tiers():
            subject = a.subjects.get(scope)
            if not subject:
                continue
            for tier in tiers:
                if tier.kind == "gcra" and a.real_us <= now_us:
                    # past: spent for good, unless the others alone leave the bucket full then
                    others = [e for e in self._emissions(scope, subject, tier) if e <= now_us]
                    if _tat(others, _interval(tier.limit, tier.window_ms)) > a.real_us:
                        self.spent.setdefault((scope, subject, tier), []).append(a.real_us)
                elif tier.kind == "fixed" and window(a.stored_ms, tier, timezone.utc)[0] == (
                    a.stored_ms
                ):
                    start = window(a.window_ms, tier, timezone.utc)[0]
                    key = (scope, subject, tier, start)
                    self.ghosts[key] = self.ghosts.get(key, 0) + 1

    def never_over(self) -> list[str]:
        """Every breach of a tier in real time (µs), by full limits: empty when none."""
        breaches = []
        for scope, tiers in self.policy.scope_tiers():
            subjects = {a.subjects.get(scope) for a in self.admissions} - {None, ""}
            for subject in subjects:
                mine = self._mine(scope, str(subject))
                times = sorted(a.real_us for a in mine)
                for tier in tiers:
                    breaches += _breaches(scope, tier, times)
        return breaches


def _interval(limit: int, window_ms: int) -> int:
    """GCRA's emission interval in µs, rounded up (never faster than the policy)."""
    return -(-window_ms * 1000 // limit)


def _tat(times: list[int], interval: int) -> int:
    """GCRA's arrival time after ``times`` (µs), counted from every start: the most any
    ``a + (emissions at or after a) · interval`` reaches; 0 without emissions."""
    return max((a + sum(1 for e in times if e >= a) * interval for a in times), default=0)


def _share_base(times: list[int], now_us: int, full: int, part: int) -> int:
    """Where a share's bucket starts (µs, 0: none): the tokens the full bucket's past holds
    at ``now_us`` (its arrival time over the emissions up to now, counted from every start,
    less now, in whole intervals rounded up), each held for ``part``."""
    tat = _tat([e for e in times if e <= now_us], full)
    if tat <= now_us:
        return 0
    return now_us + min(-(-(tat - now_us) // full) * part, 1 << 52)


def _spans_keep(times: list[int], x_us: int, limit: int, interval: int, base: int = 0) -> bool:
    """Whether every span ``[a, b]`` of ``times`` plus ``x_us`` that holds ``x_us`` holds at
    most ``limit + (b - a) / interval`` emissions (GCRA's condition, counted). ``base`` (µs,
    0: none) starts a bucket whose arrival time is already there: every ``b`` at or after
    ``x_us`` has at most ``limit + (b - base) / interval`` emissions up to it."""
    points = sorted([*times, x_us])
    if base:
        for b in points:
            if b >= x_us and (sum(1 for e in points if e <= b) - limit) * interval > b - base:
                return False
    for a in points:
        for b in points:
            if a <= x_us <= b:
                count = sum(1 for e in points if a <= e <= b)
                if (count - limit) * interval > b - a:
                    return False
    return True


def _gcra_candidates(e: int, tier: Tier, share: float, n: int) -> set[int]:
    """The ms where a gcra tier's answer may start because of the emission at ``e`` µs: ``e``
    itself and ``e + k·T`` for the tier's interval and the share's."""
    out = {-(-e // 1000)}
    for limit in {tier.limit, max(1, math.floor(tier.limit * share + 1e-9))}:
        interval = _interval(limit, tier.window_ms)
        for k in range(-limit, n + 2):
            out.add(-(-(e + k * interval) // 1000))
    return out


def _window_room(stored: list[int], x: int, window_ms: int, limit: int) -> bool:
    """Whether every window of ``window_ms`` ms holding ``x`` has fewer than ``limit`` entries."""
    starts = {x - window_ms + 1} | {e - window_ms + 1 for e in stored if x <= e < x + window_ms}
    starts |= {e for e in stored if x - window_ms < e <= x}
    return all(sum(1 for e in stored if a <= e < a + window_ms) < limit for a in starts if a <= x)


def _breaches(scope: str, tier: Tier, times: list[int]) -> list[str]:
    w = tier.window_ms * 1000
    out = []
    if tier.kind == "sliding":
        for x in times:
            if sum(1 for t in times if x - w < t <= x) > tier.limit:
                out.append(f"{scope} {tier} over at {x} µs")
    elif tier.kind == "fixed":
        starts = [window(t // 1000, tier, timezone.utc)[0] for t in times]
        for start in set(starts):
            if starts.count(start) > tier.limit:
                out.append(f"{scope} {tier} over in window {start}")
    else:  # any span [a, b] holds at most L + (b - a) / (W / L) admissions, exactly
        for i, a in enumerate(times):
            for j in range(i, len(times)):
                if (j - i + 1 - tier.limit) * w > (times[j] - a) * tier.limit:
                    out.append(f"{scope} {tier} over in [{a}, {times[j]}] µs")
    return out
