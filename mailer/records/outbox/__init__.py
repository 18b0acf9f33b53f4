"""The outbox: each mail's first message, kept from ``send_mail.delay`` until a worker receives it.

kombu's Redis transport pops a message (``BRPOP``) and records it as unacknowledged in a second
round trip: a consumer that dies between the two loses the message, and for a mail's first
message it is the only copy (a booked mail's later runs are watched by the schedule). So
``send_mail.delay`` writes the message's payload here first (one script call on the ledger's
Redis, before the publish), and the worker's main process removes it when it receives the
message (after kombu recorded it as unacknowledged). What stays here past a grace
(``MAILGUARD_OUTBOX_GRACE``) *and* was popped is lost: the watchdog publishes it again.

"Popped" is what keeps a backlog from being doubled: a newsletter of 100 000 mails waits in the
queue far longer than the grace with nothing lost. Each lane (a broker priority of the queue:
a FIFO) has a *mark*, the write time of the latest entry a worker received from it; an entry
written more than :data:`ORDER_SLACK` before the mark was popped before that one (first in,
first out), so if it is still here its message is gone. An entry with nothing received behind
it is shown popped only when the caller saw the whole queue empty (``drained``).
A receipt that finds no entry is remembered for :data:`CLEARED_TTL` seconds, so a put that
arrives after it (overtaken by its publish and the receipt) writes nothing: a mail received is
never left behind to look lost.

- :mod:`mailer.records.outbox.base`: the :class:`Outbox` protocol, :class:`Pending`, the bounds
- :mod:`mailer.records.outbox.memory`: :class:`MemoryOutbox`, inside one process
- :mod:`mailer.records.outbox.redis`: :class:`RedisOutbox`; scripts in ``lua/``
- :func:`outbox_from_url`: the one that fits a URL's scheme
"""

from __future__ import annotations

from typing import Any

from mailer.clock import Clock
from mailer.defaults import QUEUE
from mailer.records.outbox.base import (
    CLEARED_TTL,
    LANES,
    ORDER_SLACK,
    OUTBOX_TTL,
    OVERDUE_LIMIT,
    Outbox,
    Overdue,
    Pending,
    lane_of,
)
from mailer.records.outbox.memory import MemoryOutbox
from mailer.records.outbox.redis import RedisOutbox
from mailer.storage import client_from_url, is_memory


def outbox_from_url(
    url: str,
    *,
    client: Any = None,
    clock: Clock | None = None,
    namespace: str = "mailguard",
    queue: str = QUEUE,
    owner: str = "",
) -> Outbox:
    """The outbox of ``queue`` on ``memory://`` (on ``clock``) or a Redis URL (the ledger's;
    Redis's clock); ``client`` reuses a redis-py client. ``owner`` as the schedule's: the
    key is ``<ns>:{outbox:<queue>@<owner>}``, or ``<ns>:{outbox:<queue>}`` when empty."""
    if is_memory(url):
        return MemoryOutbox(clock)
    client = client if client is not None else client_from_url(url)
    name = f"{queue}@{owner}" if owner else queue
    return RedisOutbox(client, url, namespace=namespace, queue=name)


__all__ = [
    "CLEARED_TTL",
    "LANES",
    "ORDER_SLACK",
    "OUTBOX_TTL",
    "OVERDUE_LIMIT",
    "MemoryOutbox",
    "Outbox",
    "Overdue",
    "Pending",
    "RedisOutbox",
    "lane_of",
    "outbox_from_url",
]
