"""A brute-force model of the limiter's contract, the oracle of ``test_limiter_properties.py``.

The contract it encodes (README, "The limiter"): for every tier ``L/W`` of the policy, no window
``(t - W, t]`` holds more than ``L`` admissions; ``acquire`` admits now if it can, otherwise books
the earliest time that keeps every tier (never ahead of an existing booking, at most ``max_wait``
away) or refuses and consumes nothing; the same ``mail_id``, while its entry is inside the
longest window, gets its slot back and consumes nothing more; ``release`` gives a slot back;
``peek`` answers without consuming. The binding tier is the one whose own wait is longest.

It keeps every admission made (minus releases) and finds answers by trying candidate times and
counting windows, so it shares no shortcut with :mod:`mailer.limits.sliding_log` (no ``ts[n-L] + W``
formula, no pruning): a bug there does not repeat here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mailer.limits.policy import Policy


@dataclass
class Entry:
    at_ms: int
    mail_id: str | None


@dataclass
class ModelAnswer:
    allowed: bool
    booked: bool
    at_ms: int
    wait_ms: int
    tier_index: int  # 1-based, 0 for none
    remaining: tuple[int, ...]


@dataclass
class Model:
    policy: Policy
    entries: dict[str, list[Entry]] = field(default_factory=dict)

    @property
    def _tiers(self) -> list[tuple[int, int]]:
        return [(t.limit, t.window_ms) for t in self.policy.tiers]

    def _count(self, times: list[int], end: int, window: int) -> int:
        return sum(1 for t in times if end - window < t <= end)

    def never_over(self, times: list[int]) -> bool:
        """Every window (t - W, t] ending at an entry holds at most L entries, for every tier."""
        return all(
            self._count(times, end, window) <= limit
            for limit, window in self._tiers
            for end in times
        )

    def _admissible(self, times: list[int], x: int) -> bool:
        return self.never_over([*times, x])

    def _earliest(self, times: list[int], low: int) -> int:
        candidates = {low} | {t + w for t in times for _, w in self._tiers if t + w > low}
        return min(c for c in candidates if self._admissible(times, c))

    def _tier_wait(self, times: list[int], now: int, limit: int, window: int) -> int:
        # earliest c >= now such that this tier alone has room for one more at c
        candidates = {now} | {t + window for t in times if t + window > now}
        return min(c for c in candidates if sum(1 for t in times if t > c - window) < limit) - now

    def _remaining(self, times: list[int], at: int) -> tuple[int, ...]:
        return tuple(
            max(0, limit - sum(1 for t in times if t > at - window))
            for limit, window in self._tiers
        )

    def acquire(self, key: str, now: int, mail_id: str | None, max_wait_ms: int) -> ModelAnswer:
        log = self.entries.setdefault(key, [])
        times = [e.at_ms for e in log]
        if mail_id is not None:
            for e in log:
                if e.mail_id == mail_id and e.at_ms > now - self.policy.max_window_ms:
                    at = e.at_ms
                    seen = max(at, now)
                    return ModelAnswer(
                        at <= now, at > now, at, max(0, at - now), 0, self._remaining(times, seen)
                    )
        low = max([now, *times])
        t = self._earliest(times, low)
        waits = [self._tier_wait(times, now, limit, window) for limit, window in self._tiers]
        longest = max(waits)
        tier = waits.index(longest) + 1 if longest > 0 else 0
        if t == now:
            log.append(Entry(now, mail_id))
            return ModelAnswer(True, False, now, 0, 0, self._remaining([*times, now], now))
        if t - now <= max_wait_ms:
            log.append(Entry(t, mail_id))
            return ModelAnswer(False, True, t, t - now, tier, self._remaining([*times, t], t))
        return ModelAnswer(False, False, t, t - now, tier, self._remaining(times, now))

    def peek(self, key: str, now: int) -> ModelAnswer:
        times = [e.at_ms for e in self.entries.get(key, [])]
        t = self._earliest(times, max([now, *times]))
        waits = [self._tier_wait(times, now, limit, window) for limit, window in self._tiers]
        longest = max(waits)
        tier = waits.index(longest) + 1 if longest > 0 and t > now else 0
        return ModelAnswer(t == now, False, t, t - now, tier, self._remaining(times, now))

    def release(self, key: str, now: int, mail_id: str) -> bool:
        log = self.entries.get(key, [])
        for i, e in enumerate(log):
            if e.mail_id == mail_id and e.at_ms > now - self.policy.max_window_ms:
                del log[i]
                return True
        return False
