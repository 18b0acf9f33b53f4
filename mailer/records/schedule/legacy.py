"""Schedules named after a broker URL, moved into their queue's sharded schedule.

A queue's parked mails live in one schedule, sharded (:mod:`mailer.records.schedule.redis`;
its single-slot predecessor ``<ns>:{schedule:<queue>}`` is read there as one more shard).
Schedules keyed by a hash of an app's broker URL as well, ``<ns>:{schedule:<queue>@<12 hex>}``, are
still read: :func:`move_legacy` moves every entry of every such schedule of the queue into the
queue's one, where it keeps its place (parked by due time, watched by the watchdog's time, a
promoting one due at once, a dead letter still dead; each in the shard its mail id chooses).

Entry by entry, each first written where it goes and only then removed where it was (the
schedules have different hash tags: no script may touch both on a Cluster). A process killed
in between leaves the mail in both; the copy promoted second finds the mail claimed or sent in
the ledger and sends nothing. Not for a memory schedule: it never had such names.
"""

from __future__ import annotations

import time
from typing import Any

from mailer.records.schedule.ids import earlier, stored
from mailer.records.schedule.redis import RedisSchedule
from mailer.records.schedule.shard import ScheduleShard


def legacy_names(client: Any, namespace: str, queue: str) -> list[str]:
    """The names (``<queue>@<hex>``) of the schedules of ``queue`` keyed by a broker URL's
    hash, found with ``SCAN`` (one pass over the database: for a worker's start, not a loop)."""
    tag = "".join(c for c in queue if c not in "{}")
    escaped = "".join(f"\\{c}" if c in "*?[]\\" else c for c in tag)
    pattern = f"{namespace}:{{schedule:{escaped}@*}}:payloads"
    prefix, suffix = f"{namespace}:{{schedule:", "}:payloads"
    names = set()
    for raw in client.scan_iter(match=pattern, count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        names.add(key[len(prefix) : -len(suffix)])
    return sorted(names)


def move_entries(source: ScheduleShard, target: RedisSchedule) -> int:
    """Move every entry of ``source`` into ``target`` (see the module's docstring); how many
    entries moved. Raises :class:`~mailer.errors.BackendUnavailable` when Redis is down
    (what moved stays moved; the rest is moved by the next call)."""
    moved = 0
    now = time.time()
    client = source.client
    for mail_id, due, payload in list(source.scan()):
        names = [name for name in (stored(mail_id), earlier(mail_id)) if name]
        watched = next(
            (s for s in (client.zscore(source.watch_key, n) for n in names) if s is not None), None
        )
        if watched is not None:
            target.watch(mail_id, float(watched) / 1000, payload)
        else:
            target.park(mail_id, now if due is None else due, payload)
        source.cancel(mail_id)
        moved += 1
    for mail_id, payload in source.dead_letters(limit=1_000_000):
        target.client.hset(target.shard_of(mail_id).dead_key, stored(mail_id), payload)
        client.hdel(source.dead_key, stored(mail_id), earlier(mail_id) or stored(mail_id))
        moved += 1
    return moved


def move_legacy(target: RedisSchedule, namespace: str, queue: str) -> int:
    """Move the entries of every broker-keyed schedule of ``queue`` into ``target`` (the
    queue's sharded schedule); how many moved. The single-slot schedule is not moved: the
    sharded one reads it as one more shard until it is empty (:mod:`.redis`)."""
    moved = 0
    with target.unavailable():
        for name in legacy_names(target.client, namespace, queue):
            old = RedisSchedule(
                target.client, target.url, namespace=namespace, queue=name, shards=1
            )
            moved += move_entries(old.shards[0], target)
    return moved
