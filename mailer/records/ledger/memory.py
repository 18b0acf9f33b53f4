"""The ledger in a dict: for tests, the demo, and a threads or solo pool (one process)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from mailer.clock import Clock, system_clock
from mailer.outcomes import Outcome
from mailer.records.ledger.base import (
    FIRST_SEEN_TTL,
    MAX_DEAD_LETTERS,
    RUNS_TTL,
    SENT_TTL,
    TURN_TTL,
    Begun,
    Claimed,
    Superseded,
    Turn,
)

#: Outcomes kept before the first sweep of expired entries.
SWEEP_FROM = 1024


class MemoryLedger:
    """The ledger inside one process (tests, the demo, a threads or solo pool)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or system_clock
        self._lock = threading.Lock()
        self._claims: dict[str, tuple[str, float]] = {}
        self._done: dict[str, tuple[Outcome, float]] = {}
        self._runs: dict[str, tuple[int, float]] = {}
        self._seen: dict[str, tuple[float, float]] = {}  # first_seen, expiry
        self._turns: dict[str, tuple[Turn, float]] = {}  # the latest claiming run's, expiry
        self._dead: list[Outcome] = []
        self._sweep_at = SWEEP_FROM  # sweep expired entries when this many outcomes are kept

    def begin(
        self,
        mail_id: str,
        owner: str,
        lease: float,
        *,
        takeover: str | None = None,
        first_seen: float | None = None,
        turn: Turn | None = None,
    ) -> Begun:
        now = self._clock()
        with self._lock:
            done = self._done.get(mail_id)
            if done is not None and done[1] > now:
                return done[0]
            kept = self._turns.get(mail_id)
            last = kept[0] if kept is not None and kept[1] > now else None
            if turn is not None and last is not None and _stale(turn, last):
                return Superseded(last.number)
            held = self._claims.get(mail_id)
            if held is not None and held[1] > now and held[0] not in (owner, takeover):
                return False
            self._claims[mail_id] = (owner, now + lease)
            if turn is not None and turn.number > 0 and (last is None or turn.number > last.number):
                self._turns[mail_id] = (turn, now + TURN_TTL)
            if first_seen is None:
                return True
            seen = self._seen.get(mail_id)
            if seen is None or seen[1] <= now:
                seen = self._seen[mail_id] = (first_seen, now + FIRST_SEEN_TTL)
            return Claimed(seen[0])

    def unclaim(self, mail_id: str, owner: str) -> None:
        with self._lock:
            self._runs.pop(mail_id, None)
            held = self._claims.get(mail_id)
            if held is not None and held[0] == owner:
                del self._claims[mail_id]

    def parked(self, mail_id: str) -> bool:
        """Nothing: this ledger reads no schedule, so the first run's ``first_seen`` stays
        for a late copy of its first message (until :data:`FIRST_SEEN_TTL`)."""
        return False

    def recognise_parked(
        self, payloads_key: str, field: Callable[[str], str | bytes] = str
    ) -> bool:
        """False: this ledger reads no schedule."""
        return False

    def record(self, outcome: Outcome) -> None:
        now = self._clock()
        with self._lock:
            self._done[outcome.mail_id] = (outcome, now + SENT_TTL)
            self._claims.pop(outcome.mail_id, None)
            self._runs.pop(outcome.mail_id, None)
            self._seen.pop(outcome.mail_id, None)
            self._turns.pop(outcome.mail_id, None)
            if len(self._done) >= self._sweep_at:
                self._sweep(now)

    def _sweep(self, now: float) -> None:
        """Forget expired entries. The next sweep comes when the outcomes kept have doubled:
        a sweep reads every entry, so each record pays for a constant share of one."""
        for table in (self._done, self._seen, self._turns):
            for key in [k for k, (_, exp) in table.items() if exp <= now]:
                del table[key]
        self._sweep_at = max(SWEEP_FROM, 2 * len(self._done))

    def handoff(self, mail_id: str) -> int:
        now = self._clock()
        with self._lock:
            done = self._done.get(mail_id)
            held = self._claims.get(mail_id)
            if (done is not None and done[1] > now) or (held is not None and held[1] > now):
                return 0
            count, expires = self._runs.get(mail_id, (0, now))
            count = count + 1 if expires > now else 1
            self._runs[mail_id] = (count, now + RUNS_TTL)
            return count

    def quarantine(self, outcome: Outcome) -> None:
        self.record(outcome)
        with self._lock:
            self._dead.insert(0, outcome)
            del self._dead[MAX_DEAD_LETTERS:]

    def dead_letters(self, limit: int = 100) -> list[Outcome]:
        with self._lock:
            return self._dead[:limit]

    def recorded(self, mail_id: str) -> Outcome | None:
        with self._lock:
            done = self._done.get(mail_id)
        return done[0] if done is not None and done[1] > self._clock() else None


def _stale(turn: Turn, last: Turn) -> bool:
    """Whether a run of ``turn`` is a stale copy, the latest claiming run's being ``last``."""
    return turn.number < last.number or (turn.number == last.number and turn.parent != last.parent)
