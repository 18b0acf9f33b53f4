"""The schedule in Redis (the ledger's), sharded over several hash slots.

One schedule per queue (``<q>``, ``MAILGUARD_QUEUE``): a promoter publishes to its own queue,
so workers of another queue on the same Redis (``mailguard demo --redis``) never take its mails.

**Shards.** On a Redis Cluster (``redis+cluster://``) a queue's entries are spread over
:data:`SHARDS` shards
(:class:`~mailer.records.schedule.shard.ScheduleShard`, each its own keys under one hash tag,
``<ns>:{schedule/<i>.<k>:<q>}``): the mail id decides its shard (CRC-32 of the id, modulo the
count), so ``cancel``, ``forget``, ``running`` and ``watch`` go to one shard without a search.
Each shard's tag is chosen (the smallest ``k``) so that its Cluster slot falls in the ``i``-th
of :data:`SHARDS` equal ranges of the 16 384 slots: a Cluster whose nodes hold equal slot
ranges (``redis-cli --cluster create``) gets an equal share of the shards on each node
(6 shards: 2, 3 or 6 nodes evenly). Every process computes the same tags. On one Redis server
(or Sentinel) there is one shard, ``<ns>:{schedule:<q>}``: shards spread nothing there, and each
costs a poll two more ``ZRANGE`` (:func:`shards_for`).

**Reads across shards.** :meth:`RedisSchedule.next_due` reads the first ``due`` and ``watch``
entry of every shard in one pipeline (two ``ZRANGE`` a shard: the idle cost of a poll).
:meth:`RedisSchedule.take_due` reads them too, then calls the take script on each shard that
has something due, earliest first shard first: each gets an equal share of ``limit``, the
shards that filled their share share what is left. No shard waits behind another's backlog;
what is taken is returned earliest first. :meth:`RedisSchedule.stats` sums the shards.
"""

from __future__ import annotations

import itertools
import math
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from mailer.defaults import QUEUE
from mailer.records.schedule.base import PROMOTE_LEASE, TAKE_AHEAD, TAKE_LIMIT, ScheduleStats, Taken
from mailer.records.schedule.shard import ScheduleShard, first_of
from mailer.storage import RedisStore, is_cluster

#: How many shards a queue's schedule has (every process of a deployment must agree).
SHARDS = 6


def shards_for(url: str) -> int:
    """The shards of a schedule at ``url``: :data:`SHARDS` on a Redis Cluster, else one (every
    process of a deployment reaches the ledger by the same kind of URL, so all agree)."""
    return SHARDS if is_cluster(url) else 1


def shard_tags(queue: str, count: int) -> list[str]:
    """The hash tags of ``queue``'s ``count`` shards (the module's docstring); one shard:
    ``schedule:<q>``."""
    clean = "".join(c for c in queue if c not in "{}")
    if count == 1:
        return [f"schedule:{clean}"]
    tags = []
    for i in range(count):
        low = i * REDIS_CLUSTER_HASH_SLOTS // count
        high = (i + 1) * REDIS_CLUSTER_HASH_SLOTS // count
        for k in itertools.count():
            tag = f"schedule/{i}.{k}:{clean}"
            if low <= key_slot(tag.encode()) < high:
                break
        tags.append(tag)
    return tags


class RedisSchedule:
    """:class:`~mailer.records.schedule.base.Schedule` in Redis over ``shards`` shards (None:
    :func:`shards_for` the URL); raises :class:`~mailer.errors.BackendUnavailable`
    (``backend="ledger"``) when Redis is down."""

    def __init__(
        self,
        client: Any,
        url: str,
        namespace: str = "mailguard",
        queue: str = QUEUE,
        *,
        shards: int | None = None,
    ) -> None:
        if shards is None:
            shards = shards_for(url)
        if shards < 1:
            raise ValueError(f"a schedule needs at least one shard, got {shards}")
        self._redis = RedisStore(client, url, backend="ledger")
        self.shards = [
            ScheduleShard(self._redis, f"{namespace}:{{{tag}}}")
            for tag in shard_tags(queue, shards)
        ]
        #: id(shard) -> (monotonic time it was read, its first ``due`` score): see next_due.
        self._due_read: dict[int, tuple[float, float | None]] = {}

    @property
    def client(self) -> Any:
        """The redis-py client (shared with the ledger when built from it)."""
        return self._redis.client

    @property
    def url(self) -> str:
        """The URL it reports when Redis is down."""
        return self._redis.url

    def parked_payloads_key(self) -> str | None:
        """The payloads hash of its one shard; None for a sharded (Cluster) schedule."""
        return self.shards[0].payloads_key if len(self.shards) == 1 else None

    def wait_wake(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds (under the client's socket timeout) for a watch that
        became a shard's first (``watch.lua`` pushes to the shard's ``wake`` list): whether one
        came. One ``BLPOP`` over every shard's list; on a Redis Cluster (the lists in several
        slots) a plain sleep, answering False."""
        if is_cluster(self.url):
            time.sleep(timeout)
            return False
        keys = [shard.wake_key for shard in self.shards]
        return self._redis.call(self.client.blpop, keys, timeout=max(timeout, 0.01)) is not None

    def unavailable(self) -> AbstractContextManager[None]:
        """A block in which Redis being down raises ``BackendUnavailable`` (direct calls)."""
        return self._redis.unavailable()

    def shard_of(self, mail_id: str) -> ScheduleShard:
        """The shard ``mail_id`` is parked or watched in."""
        return self.shards[zlib.crc32(mail_id.encode()) % len(self.shards)]

    def park(self, mail_id: str, due: float, payload: bytes) -> None:
        own = self.shard_of(mail_id)
        own.park(mail_id, due, payload)
        self._due_read.pop(id(own), None)

    def watch(self, mail_id: str, due: float, payload: bytes) -> None:
        self.shard_of(mail_id).watch(mail_id, due, payload)

    def running(self, mail_id: str, lease: float) -> bool:
        return self.shard_of(mail_id).running(mail_id, lease)

    def forget(self, mail_id: str) -> bool:
        return self.shard_of(mail_id).forget(mail_id)

    def release(self, taken: Sequence[Taken], after: float) -> int:
        groups = self._groups(taken)
        for shard, _ in groups:
            self._due_read.pop(id(shard), None)
        return sum(shard.release(group, after) for shard, group in groups)

    def done(self, mail_ids: Sequence[str]) -> int:
        groups = self._groups([Taken(mail_id, None) for mail_id in mail_ids])
        return sum(shard.done([t.mail_id for t in group]) for shard, group in groups)

    def _groups(self, taken: Sequence[Taken]) -> list[tuple[ScheduleShard, list[Taken]]]:
        """``taken`` by shard."""
        by_shard: dict[int, list[Taken]] = {}
        for entry in taken:
            by_shard.setdefault(id(self.shard_of(entry.mail_id)), []).append(entry)
        return [(s, by_shard[id(s)]) for s in self.shards if id(s) in by_shard]

    def take_due(
        self, limit: int = TAKE_LIMIT, lease: float = PROMOTE_LEASE, ahead: float = TAKE_AHEAD
    ) -> list[Taken]:
        limit = max(int(limit), 1)
        # Shards with something due by this clock (the take reads Redis's; a second's slack).
        horizon = time.time() + ahead + 1.0
        due = sorted(
            (first, n, shard)
            for n, (shard, first) in enumerate(self._firsts())
            if first is not None and first <= horizon
        )
        rows: list[tuple[Taken, float]] = []
        share = math.ceil(limit / len(due)) if due else 0
        filled = []
        for _, _, shard in due:
            self._due_read.pop(id(shard), None)  # its first entry changes
            want = min(share, limit - len(rows))
            got = shard.take(want, lease, ahead) if want > 0 else []
            rows.extend(got)
            if got and len(got) == want:
                filled.append(shard)
        for shard in filled:  # what is left, to the shards that may hold more
            if len(rows) < limit:
                rows.extend(shard.take(limit - len(rows), lease, ahead))
        rows.sort(key=lambda row: (row[0].watched, row[1], row[0].mail_id))
        return [entry for entry, _ in rows]

    def _firsts(self, stale: float = 0.0) -> list[tuple[ScheduleShard, float | None]]:
        """Each shard and when it next has something to hand out: one pipeline, its ``watch``
        first always read, its ``due`` first only when the last read is ``stale`` seconds old
        (see :meth:`next_due`)."""
        shards = self.shards
        now = time.monotonic()
        fresh = [
            stale <= 0 or (read := self._due_read.get(id(s))) is None or now - read[0] >= stale
            for s in shards
        ]
        pipe = self.client.pipeline(transaction=False)
        for shard, read_due in zip(shards, fresh, strict=True):
            if read_due:
                pipe.zrange(shard.due_key, 0, 0, withscores=True)
            pipe.zrange(shard.watch_key, 0, 0, withscores=True)
        replies = iter(self._redis.call(pipe.execute))
        firsts = []
        for n, (shard, read_due) in enumerate(zip(shards, fresh, strict=True)):
            if read_due:
                # Read times staggered over ``stale``: the shards' next reads spread over polls.
                self._due_read[id(shard)] = (now - stale * n / len(shards), first_of(next(replies)))
            watched = first_of(next(replies))
            times = [t for t in (self._due_read[id(shard)][1], watched) if t is not None]
            firsts.append((shard, min(times, default=None)))
        return firsts

    def next_due(self, stale: float = 0.0) -> float | None:
        """The earliest due time, lease end or watch (None: empty). ``stale`` > 0 (a poller's):
        each shard's ``due`` set is read again only ``stale`` seconds after its last read (the
        reads spread over the polls), its ``watch`` set always; this instance's own ``park``,
        ``release`` and takes are seen at once. Safe while every entry parked by another
        process is due more than ``stale`` plus ``TAKE_AHEAD`` seconds after it was written
        (parked mails wait longer than ``MAILGUARD_PARK_AFTER``)."""
        return min((t for _, t in self._firsts(stale) if t is not None), default=None)

    def bury(self, mail_id: str) -> None:
        self.shard_of(mail_id).bury(mail_id)

    def cancel(self, mail_id: str) -> bytes | None:
        return self.shard_of(mail_id).cancel(mail_id)

    def payload(self, mail_id: str) -> bytes | None:
        return self.shard_of(mail_id).payload(mail_id)

    def stats(self) -> ScheduleStats:
        shards = self.shards
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            shard.counts(pipe)
        replies = self._redis.call(pipe.execute)
        waiting = promoting = dead = watched = 0
        firsts: list[float] = []
        for n in range(len(shards)):
            due, promo, buried, held, first, first_watch = replies[6 * n : 6 * n + 6]
            waiting, promoting = waiting + int(due), promoting + int(promo)
            dead, watched = dead + int(buried), watched + int(held)
            firsts.extend(t for t in (first_of(first), first_of(first_watch)) if t is not None)
        # The first score may be a promoting entry's lease end: then the earliest the schedule
        # will hand out anything (an ended lease is overdue: it must be published again).
        earliest = min(firsts, default=None)
        return ScheduleStats(waiting - promoting, promoting, dead, earliest, watched)

    def scan(self) -> Iterator[tuple[str, float | None, bytes]]:
        for shard in self.shards:
            yield from shard.scan()

    def dead_letters(self, limit: int = 100) -> list[tuple[str, bytes]]:
        rows: list[tuple[str, bytes]] = []
        for shard in self.shards:
            rows.extend(shard.dead_letters(limit - len(rows)))
        return rows
