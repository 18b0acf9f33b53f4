"""The schedule: mails that wait long for their slot are parked here, not held by workers.

A booked mail whose wait is longer than ``MAILGUARD_PARK_AFTER`` is *parked*: its payload (the
task message, opaque to this package: ``workers/`` encodes it) goes into a sorted set by due
time in the ledger's Redis, and its run ends. No broker message, no worker memory, no hops.

In Redis a queue's schedule is sharded over several hash slots (:mod:`.redis`: the mail id picks its
shard; on a Cluster the shards spread evenly over the nodes). Every worker polls
:meth:`Schedule.take_due` (one script call per shard with something due, each shard an equal share):
up to N due entries move, in one atomic step per shard, to a *promoting* set under a lease; the
worker publishes each under its own task id with the remaining countdown (under a second), then
calls :meth:`Schedule.done`. A
worker killed between publishing and ``done`` leaves its lease to end; any worker then takes
the entries again and publishes a second copy, which the ledger's claim and sent marker keep
from sending twice. Nobody leads: two workers never take one entry within a lease.

A booked mail that waits as a countdown held by a worker is *watched*: its payload is kept
beside it (:meth:`Schedule.watch`), scored by the time its run should have been seen (the
countdown's end plus a grace). A run that starts pushes that time a lease ahead
(:meth:`Schedule.running`); a run that finishes removes the entry (:meth:`Schedule.forget`).
If the time passes with no run seen (the worker died, the broker lost the message), the same
take hands the entry out and the promoter publishes it again: the watchdog.

- :mod:`mailer.records.schedule.base`: the :class:`Schedule` protocol, :class:`Taken`, the defaults
- :mod:`mailer.records.schedule.memory`: :class:`MemorySchedule`, inside one process
- :mod:`mailer.records.schedule.redis`: :class:`RedisSchedule`, sharded over hash slots
- :mod:`mailer.records.schedule.shard`: :class:`ScheduleShard`, one shard's keys; scripts in
  ``lua/``
- :mod:`mailer.records.schedule.park`: when a deferral is parked (pure)
- :func:`schedule_from_url`: the one that fits a URL's scheme
"""

from __future__ import annotations

from typing import Any

from mailer.clock import Clock
from mailer.defaults import QUEUE
from mailer.records.schedule.base import (
    PROMOTE_LEASE,
    TAKE_AHEAD,
    TAKE_LIMIT,
    Schedule,
    ScheduleStats,
    Taken,
)
from mailer.records.schedule.ids import stored
from mailer.records.schedule.memory import MemorySchedule
from mailer.records.schedule.park import parked_until
from mailer.records.schedule.redis import SHARDS, RedisSchedule
from mailer.records.schedule.shard import ScheduleShard
from mailer.storage import client_from_url, is_memory


def schedule_from_url(
    url: str,
    *,
    client: Any = None,
    clock: Clock | None = None,
    namespace: str = "mailguard",
    queue: str = QUEUE,
    shards: int | None = None,
) -> Schedule:
    """The schedule of ``queue`` on ``memory://`` (on ``clock``) or a Redis URL (the ledger's;
    Redis's clock); ``client`` reuses a redis-py client; ``shards`` (Redis; None: six on a
    Cluster, one elsewhere, :func:`~mailer.records.schedule.redis.shards_for`).

    One schedule per queue in the ledger's Redis (``<ns>:{schedule:<queue>}``; on a Cluster its
    shards ``<ns>:{schedule/<i>.<k>:<queue>}``),
    whatever app or broker URL a process runs with: every worker, the CLI and cancel see the
    same parked mails.
    """
    if is_memory(url):
        return MemorySchedule(clock)
    client = client if client is not None else client_from_url(url)
    return RedisSchedule(client, url, namespace=namespace, queue=queue, shards=shards)


__all__ = [
    "PROMOTE_LEASE",
    "SHARDS",
    "TAKE_AHEAD",
    "TAKE_LIMIT",
    "MemorySchedule",
    "RedisSchedule",
    "Schedule",
    "ScheduleShard",
    "ScheduleStats",
    "Taken",
    "parked_until",
    "schedule_from_url",
    "stored",
]
