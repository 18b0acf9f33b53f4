"""One shard of the Redis schedule: its keys under one hash tag, one script call per change.

A shard is what the whole schedule was before it was sharded (:mod:`mailer.records.schedule.redis`
spreads a queue's entries over several): with the prefix ``<p>`` = ``<ns>:{<tag>}``,

- ``<p>:due``: sorted set, mail id by due time (epoch milliseconds) while parked, by the end of
  its promotion lease (ms) while promoting
- ``<p>:promoting``: set of the mail ids being promoted
- ``<p>:watch``: sorted set, mail id of a booked mail a worker holds as a countdown by the time
  a run of it should have been seen (ms); the watchdog takes it after
- ``<p>:payloads``: hash, mail id -> payload (opaque bytes)
- ``<p>:dead``: hash, mail id -> payload that could not be used

One hash tag, so one Cluster slot (every script touches several keys). Mail ids are the only
names stored in clear (a UUID as 17 bytes, any other id as its text:
:mod:`mailer.records.schedule.ids`); addresses live inside payloads only as the workers encode
them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from mailer.clock import to_ms
from mailer.records.schedule.base import Taken
from mailer.records.schedule.ids import mail_id_of, stored
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


class ScheduleShard:
    """The entries of one hash tag, ``<ns>:{<tag>}``; raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="ledger"``) when Redis is down."""

    def __init__(self, store: RedisStore, prefix: str) -> None:
        self._redis = store
        self.prefix = prefix
        self.due_key, self.promoting_key = f"{prefix}:due", f"{prefix}:promoting"
        self.payloads_key, self.dead_key = f"{prefix}:payloads", f"{prefix}:dead"
        self.watch_key = f"{prefix}:watch"
        #: A list the watch script pushes to when its watch becomes the first: the promoter's
        #: wake (:meth:`~mailer.records.schedule.RedisSchedule.wait_wake`); one item at most.
        self.wake_key = f"{prefix}:wake"
        self._waiting = [self.due_key, self.promoting_key, self.payloads_key]
        self._all = [*self._waiting, self.watch_key]
        self._park = store.script(PARK_SCRIPT)
        self._take = store.script(TAKE_SCRIPT)
        self._done = store.script(DONE_SCRIPT)
        self._bury = store.script(BURY_SCRIPT)
        self._cancel = store.script(CANCEL_SCRIPT)
        self._watch = store.script(WATCH_SCRIPT)
        self._running = store.script(RUNNING_SCRIPT)
        self._forget = store.script(FORGET_SCRIPT)
        self._release = store.script(RELEASE_SCRIPT)

    @property
    def client(self) -> Any:
        """The redis-py client."""
        return self._redis.client

    def park(self, mail_id: str, due: float, payload: bytes) -> None:
        self._park(self._all, [stored(mail_id), to_ms(due), payload])

    def watch(self, mail_id: str, due: float, payload: bytes) -> None:
        keys = [*self._all, self.wake_key]
        self._watch(keys, [stored(mail_id), to_ms(due), payload])

    def running(self, mail_id: str, lease: float) -> bool:
        return bool(self._running(self._all, [stored(mail_id), int(lease * 1000)]))

    def forget(self, mail_id: str) -> bool:
        return bool(self._forget(self._all, [stored(mail_id)]))

    def release(self, taken: Sequence[Taken], after: float) -> int:
        if not taken:
            return 0
        pairs = [value for t in taken for value in (stored(t.mail_id), "1" if t.watched else "0")]
        return int(self._release(self._all, [int(after * 1000), *pairs]))

    def take(self, limit: int, lease: float, ahead: float) -> list[tuple[Taken, float]]:
        """Up to ``limit`` entries (take.lua), each with the score it had (epoch ms)."""
        args = [max(int(limit), 1), int(lease * 1000), int(ahead * 1000)]
        flat = self._take(self._all, args)
        return [
            (
                Taken(mail_id_of(flat[i]), flat[i + 1] or None, bool(flat[i + 2])),
                float(flat[i + 3]),
            )
            for i in range(0, len(flat), 4)
        ]

    def peek(self, pipe: Any) -> None:
        """Queue on ``pipe`` the reads of the first ``due`` and ``watch`` entries (two replies,
        read by :func:`first_of`)."""
        pipe.zrange(self.due_key, 0, 0, withscores=True)
        pipe.zrange(self.watch_key, 0, 0, withscores=True)

    def counts(self, pipe: Any) -> None:
        """Queue on ``pipe`` the reads of :meth:`RedisSchedule.stats` (four replies, then the
        two of :meth:`peek`)."""
        pipe.zcard(self.due_key)
        pipe.scard(self.promoting_key)
        pipe.hlen(self.dead_key)
        pipe.zcard(self.watch_key)
        self.peek(pipe)

    def done(self, mail_ids: Sequence[str]) -> int:
        if not mail_ids:
            return 0
        return int(self._done(self._waiting, [stored(mail_id) for mail_id in mail_ids]))

    def bury(self, mail_id: str) -> None:
        self._bury([*self._waiting, self.dead_key], [stored(mail_id)])

    def cancel(self, mail_id: str) -> bytes | None:
        payload = self._cancel(self._all, [stored(mail_id)])
        return bytes(payload) if payload is not None else None

    def payload(self, mail_id: str) -> bytes | None:
        """The payload of ``mail_id``."""
        raw = self._redis.call(self.client.hget, self.payloads_key, stored(mail_id))
        return None if raw is None else bytes(raw)

    def scan(self) -> Iterator[tuple[str, float | None, bytes]]:
        client = self.client
        with self._redis.unavailable():
            for name, payload in client.hscan_iter(self.payloads_key, count=1000):
                score = client.zscore(self.due_key, name)
                if score is None:
                    score = client.zscore(self.watch_key, name)
                elif client.sismember(self.promoting_key, name):
                    score = None
                yield mail_id_of(name), None if score is None else score / 1000, bytes(payload)

    def dead_letters(self, limit: int = 100) -> list[tuple[str, bytes]]:
        rows: list[tuple[str, bytes]] = []
        if limit <= 0:
            return rows
        with self._redis.unavailable():
            for raw_id, payload in self.client.hscan_iter(self.dead_key, count=1000):
                rows.append((mail_id_of(raw_id), bytes(payload)))
                if len(rows) >= limit:
                    break
        return rows


def first_of(reply: Any) -> float | None:
    """The score of a ``ZRANGE 0 0 WITHSCORES`` reply in epoch seconds (None: empty)."""
    return float(reply[0][1]) / 1000 if reply else None
