"""The schedule in Redis (the ledger's): one script call per change, keys under one hash tag.

One schedule per queue (``<q>``, ``MAILGUARD_QUEUE``): a promoter publishes to its own queue,
so workers of another queue on the same Redis (``mailguard demo --redis``) never take its mails.

- ``<ns>:{schedule:<q>}:due``: sorted set, mail id by due time (epoch milliseconds) while parked,
  by the end of its promotion lease (ms) while promoting
- ``<ns>:{schedule:<q>}:promoting``: set of the mail ids being promoted
- ``<ns>:{schedule:<q>}:watch``: sorted set, mail id of a booked mail a worker holds as a
  countdown by the time a run of it should have been seen (ms); the watchdog takes it after
- the first scores of ``due`` and ``watch`` say whether anything is due
  (:meth:`RedisSchedule.next_due`, one pipelined round trip per poll)
- ``<ns>:{schedule:<q>}:payloads``: hash, mail id -> payload (opaque bytes)
- ``<ns>:{schedule:<q>}:dead``: hash, mail id -> payload that could not be used

One hash tag, so one Cluster slot (every script touches several keys). Mail ids are the only
names stored in clear; addresses live inside payloads only as the workers encode them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from mailer.clock import to_ms
from mailer.defaults import QUEUE
from mailer.records.schedule.base import PROMOTE_LEASE, TAKE_AHEAD, TAKE_LIMIT, ScheduleStats, Taken
from mailer.storage import RedisStore, lua_source

PARK_SCRIPT = lua_source("mailer.records.schedule", "park")
TAKE_SCRIPT = lua_source("mailer.records.schedule", "take")
DONE_SCRIPT = lua_source("mailer.records.schedule", "done")
BURY_SCRIPT = lua_source("mailer.records.schedule", "bury")
CANCEL_SCRIPT = lua_source("mailer.records.schedule", "cancel")
WATCH_SCRIPT = lua_source("mailer.records.schedule", "watch")
RUNNING_SCRIPT = lua_source("mailer.records.schedule", "running")
FORGET_SCRIPT = lua_source("mailer.records.schedule", "forget")
RELEASE_SCRIPT = lua_source("mailer.records.schedule", "release")


class RedisSchedule:
    """:class:`~mailer.records.schedule.base.Schedule` in Redis; raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="ledger"``) when Redis is down."""

    def __init__(
        self, client: Any, url: str, namespace: str = "mailguard", queue: str = QUEUE
    ) -> None:
        self._redis = RedisStore(client, url, backend="ledger")
        tag = "".join(c for c in queue if c not in "{}")
        prefix = f"{namespace}:{{schedule:{tag}}}"
        self.due_key, self.promoting_key = f"{prefix}:due", f"{prefix}:promoting"
        self.payloads_key, self.dead_key = f"{prefix}:payloads", f"{prefix}:dead"
        self.watch_key = f"{prefix}:watch"
        self._waiting = [self.due_key, self.promoting_key, self.payloads_key]
        self._all = [*self._waiting, self.watch_key]
        self._park = self._redis.script(PARK_SCRIPT)
        self._take = self._redis.script(TAKE_SCRIPT)
        self._done = self._redis.script(DONE_SCRIPT)
        self._bury = self._redis.script(BURY_SCRIPT)
        self._cancel = self._redis.script(CANCEL_SCRIPT)
        self._watch = self._redis.script(WATCH_SCRIPT)
        self._running = self._redis.script(RUNNING_SCRIPT)
        self._forget = self._redis.script(FORGET_SCRIPT)
        self._release = self._redis.script(RELEASE_SCRIPT)

    @property
    def client(self) -> Any:
        """The redis-py client (shared with the ledger when built from it)."""
        return self._redis.client

    @property
    def url(self) -> str:
        """The URL it reports when Redis is down."""
        return self._redis.url

    def unavailable(self) -> AbstractContextManager[None]:
        """A block in which Redis being down raises ``BackendUnavailable`` (direct calls)."""
        return self._redis.unavailable()

    def park(self, mail_id: str, due: float, payload: bytes) -> None:
        self._park(self._all, [mail_id, to_ms(due), payload])

    def watch(self, mail_id: str, due: float, payload: bytes) -> None:
        self._watch(self._all, [mail_id, to_ms(due), payload])

    def running(self, mail_id: str, lease: float) -> bool:
        return bool(self._running(self._all, [mail_id, int(lease * 1000)]))

    def forget(self, mail_id: str) -> bool:
        return bool(self._forget(self._all, [mail_id]))

    def release(self, taken: Sequence[Taken], after: float) -> int:
        if not taken:
            return 0
        pairs = [value for t in taken for value in (t.mail_id, "1" if t.watched else "0")]
        return int(self._release(self._all, [int(after * 1000), *pairs]))

    def take_due(
        self, limit: int = TAKE_LIMIT, lease: float = PROMOTE_LEASE, ahead: float = TAKE_AHEAD
    ) -> list[Taken]:
        args = [max(int(limit), 1), int(lease * 1000), int(ahead * 1000)]
        flat = self._take(self._all, args)
        return [
            Taken(_text(flat[i]), flat[i + 1] if flat[i + 1] else None, bool(flat[i + 2]))
            for i in range(0, len(flat), 3)
        ]

    def next_due(self) -> float | None:
        pipe = self.client.pipeline(transaction=False)
        pipe.zrange(self.due_key, 0, 0, withscores=True)
        pipe.zrange(self.watch_key, 0, 0, withscores=True)
        firsts = [row[0][1] for row in self._redis.call(pipe.execute) if row]
        return float(min(firsts)) / 1000 if firsts else None

    def done(self, mail_ids: Sequence[str]) -> int:
        if not mail_ids:
            return 0
        return int(self._done(self._waiting, mail_ids))

    def bury(self, mail_id: str) -> None:
        self._bury([*self._waiting, self.dead_key], [mail_id])

    def cancel(self, mail_id: str) -> bytes | None:
        payload = self._cancel(self._all, [mail_id])
        return bytes(payload) if payload is not None else None

    def payload(self, mail_id: str) -> bytes | None:
        raw = self._redis.call(self.client.hget, self.payloads_key, mail_id)
        return bytes(raw) if raw is not None else None

    def stats(self) -> ScheduleStats:
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(self.due_key)
        pipe.scard(self.promoting_key)
        pipe.hlen(self.dead_key)
        pipe.zrange(self.due_key, 0, 0, withscores=True)
        pipe.zcard(self.watch_key)
        pipe.zrange(self.watch_key, 0, 0, withscores=True)
        waiting, promoting, dead, first, watched, first_watch = self._redis.call(pipe.execute)
        # The first score may be a promoting entry's lease end: then the earliest the schedule
        # will hand out anything (an ended lease is overdue: it must be published again).
        firsts = [row[0][1] / 1000 for row in (first, first_watch) if row]
        earliest = min(firsts) if firsts else None
        parked = int(waiting) - int(promoting)
        return ScheduleStats(parked, int(promoting), int(dead), earliest, int(watched))

    def scan(self) -> Iterator[tuple[str, float | None, bytes]]:
        client = self.client
        with self._redis.unavailable():
            for raw_id, payload in client.hscan_iter(self.payloads_key, count=1000):
                mail_id = _text(raw_id)
                score = client.zscore(self.due_key, mail_id)
                if score is None:
                    score = client.zscore(self.watch_key, mail_id)
                elif client.sismember(self.promoting_key, mail_id):
                    score = None
                yield mail_id, None if score is None else score / 1000, bytes(payload)

    def dead_letters(self, limit: int = 100) -> list[tuple[str, bytes]]:
        rows: list[tuple[str, bytes]] = []
        with self._redis.unavailable():
            for raw_id, payload in self.client.hscan_iter(self.dead_key, count=1000):
                rows.append((_text(raw_id), bytes(payload)))
                if len(rows) >= limit:
                    break
        return rows


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
