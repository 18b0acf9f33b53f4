"""The schedule: mails that wait long for their slot are parked here, not held by workers.

A booked mail whose wait is longer than ``MAILGUARD_PARK_AFTER`` is *parked*: its payload (the
task message, opaque to this package: ``workers/`` encodes it) goes into a sorted set by due
time in the ledger's Redis, and its run ends. No broker message, no worker memory, no hops.

Every worker polls :meth:`Schedule.take_due` (one script call): up to N due entries move, in
one atomic step, to a *promoting* set under a lease; the worker publishes each under its own
task id with the remaining countdown (under a second), then calls :meth:`Schedule.done`. A
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
- :mod:`mailer.records.schedule.redis`: :class:`RedisSchedule`; scripts in ``lua/``
- :mod:`mailer.records.schedule.park`: when a deferral is parked (pure)
- :mod:`mailer.records.schedule.legacy`: schedules named after a broker URL, moved into the
  queue's one schedule
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
from mailer.records.schedule.memory import MemorySchedule
from mailer.records.schedule.redis import RedisSchedule
from mailer.storage import client_from_url, is_memory


def schedule_from_url(
    url: str,
    *,
    client: Any = None,
    clock: Clock | None = None,
    namespace: str = "mailguard",
    queue: str = QUEUE,
) -> Schedule:
    """The schedule of ``queue`` on ``memory://`` (on ``clock``) or a Redis URL (the ledger's;
    Redis's clock); ``client`` reuses a redis-py client.

    One schedule per queue in the ledger's Redis, ``<ns>:{schedule:<queue>}``, whatever app or
    broker URL a process runs with: every worker, the CLI and cancel see the same parked mails.
    """
    if is_memory(url):
        return MemorySchedule(clock)
    client = client if client is not None else client_from_url(url)
    return RedisSchedule(client, url, namespace=namespace, queue=queue)


__all__ = [
    "PROMOTE_LEASE",
    "TAKE_AHEAD",
    "TAKE_LIMIT",
    "MemorySchedule",
    "RedisSchedule",
    "Schedule",
    "ScheduleStats",
    "Taken",
    "schedule_from_url",
]
