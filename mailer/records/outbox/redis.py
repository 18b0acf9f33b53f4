"""The outbox in Redis (on the ledger's server): one script call per change, keys under one
hash tag.

One outbox per queue (``<q>``, with an owner suffix as the schedule's: see
:func:`~mailer.records.outbox.outbox_from_url`):

- ``<ns>:{outbox:<q>}:at:<lane>``: sorted set per lane (a broker priority ``0``-``9``, or ``-``),
  mail id by the time its entry was written (epoch milliseconds, Redis's clock)
- ``<ns>:{outbox:<q>}:payloads``: hash, mail id -> payload (opaque bytes: the task message as
  ``workers/waiting/payload.py`` encodes it, as the schedule's)
- ``<ns>:{outbox:<q>}:received``: sorted set, lane -> the latest write time (ms) of an entry
  received from it (the lane's mark)
- ``<ns>:{outbox:<q>}:cleared``: sorted set, mail id -> when a receipt found no entry (ms), for
  :data:`~mailer.records.outbox.base.CLEARED_TTL`: a put arriving after it writes nothing

Every key expires :data:`~mailer.records.outbox.base.OUTBOX_TTL` after a write, set by each
process at most every :data:`EXPIRY_REFRESH` seconds per lane (a put or a receipt pays for no
``PEXPIRE`` in between), and an entry older than the TTL is removed by the next
:meth:`RedisOutbox.overdue`. A put that rides ahead of its own publish reads nothing of the
receipts (none can come first). One hash tag, so one
Cluster slot. Mail ids are the only names stored in clear; addresses live inside payloads only as
the workers encode them.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

from mailer.defaults import QUEUE
from mailer.records.outbox.base import (
    CLEARED_TTL,
    LANES,
    ORDER_SLACK,
    OUTBOX_TTL,
    OVERDUE_LIMIT,
    Overdue,
    Pending,
)
from mailer.records.outbox.writer import LaterWriter
from mailer.storage import RedisStore, lua_source

PUT_SCRIPT = lua_source("mailer.records.outbox", "put")
CLEAR_SCRIPT = lua_source("mailer.records.outbox", "clear")
OVERDUE_SCRIPT = lua_source("mailer.records.outbox", "overdue")
TAKE_SCRIPT = lua_source("mailer.records.outbox", "take")
_TTL_MS = int(OUTBOX_TTL * 1000)
_CLEARED_MS = int(CLEARED_TTL * 1000)
PUT_SHA = hashlib.sha1(PUT_SCRIPT.encode()).hexdigest()  # noqa: S324 # Redis's naming
#: Seconds between two expiry refreshes of one lane's keys by one process: a key emptied and
#: written again (a lane whose every entry was received) carries no expiry for at most that
#: long, and a busy process pays two ``PEXPIRE`` a minute instead of two a mail.
EXPIRY_REFRESH = 60.0


class RedisOutbox:
    """:class:`~mailer.records.outbox.base.Outbox` in Redis; raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="ledger"``) when Redis is down."""

    def __init__(
        self, client: Any, url: str, namespace: str = "mailguard", queue: str = QUEUE
    ) -> None:
        self._redis = RedisStore(client, url, backend="ledger")
        tag = "".join(c for c in queue if c not in "{}")
        self.prefix = f"{namespace}:{{outbox:{tag}}}"
        self.payloads_key = f"{self.prefix}:payloads"
        self.received_key = f"{self.prefix}:received"
        self.cleared_key = f"{self.prefix}:cleared"
        self._put = self._redis.script(PUT_SCRIPT)
        self._clear = self._redis.script(CLEAR_SCRIPT)
        self._overdue = self._redis.script(OVERDUE_SCRIPT)
        self._take = self._redis.script(TAKE_SCRIPT)
        self._refreshed: dict[tuple[str, str], float] = {}  # (step, lane) -> monotonic
        pool = getattr(client, "connection_pool", None)
        self._later = self._later_clear = None
        if pool is not None:
            self._later = LaterWriter(self._redis, PUT_SCRIPT, self._put)
            self._later_clear = LaterWriter(
                self._redis, CLEAR_SCRIPT, self._clear, keep_unconfirmed=True
            )

    @property
    def client(self) -> Any:
        """The redis-py client (shared with the schedule when built from it)."""
        return self._redis.client

    def lane_key(self, lane: str) -> str:
        """The sorted set of ``lane``'s entries."""
        return f"{self.prefix}:at:{''.join(c for c in lane if c not in '{}')}"

    def _keys(self, lane: str) -> list[str]:
        """The keys of put.lua and clear.lua for an entry of ``lane``."""
        return [self.lane_key(lane), self.payloads_key, self.received_key, self.cleared_key]

    def _ttl(self, step: str, lane: str) -> int:
        """The TTL (ms) for ``step``'s script to set on ``lane``'s keys: 0 (leave it) when this
        process set it within the last :data:`EXPIRY_REFRESH` seconds."""
        now = time.monotonic()
        last = self._refreshed.get((step, lane))
        if last is not None and now - last < EXPIRY_REFRESH:
            return 0
        self._refreshed[step, lane] = now
        return _TTL_MS

    def put(self, mail_id: str, lane: str, payload: bytes) -> None:
        keys = self._keys(lane)
        self._put(keys, [mail_id, payload, self._ttl("put", lane), _CLEARED_MS])

    def put_later(self, mail_id: str, lane: str, payload: bytes) -> None:
        """Written to a connection of its own, the answer read later
        (:class:`~mailer.records.outbox.writer.LaterWriter`); a client without one pool (Redis
        Cluster) makes the whole :meth:`put` at once."""
        keys = self._keys(lane)
        args = [mail_id, payload, self._ttl("put", lane), _CLEARED_MS]
        if self._later is None:
            self._put(keys, args)
            return
        self._later.write(keys, args)

    def is_empty(self) -> bool:
        """One ``EXISTS`` of every lane's sorted set (they share one hash slot)."""
        return int(self.client.exists(*[self.lane_key(lane) for lane in LANES])) == 0

    def put_command(self, mail_id: str, lane: str, payload: bytes) -> tuple[Any, ...] | None:
        """:meth:`put` as one ``EVALSHA`` command, for a caller that sends it itself ahead of
        its own commands, on a connection to this outbox's server with :attr:`db` selected (the
        broker's publish: :mod:`workers.outbox.ride`). An answer ``NOSCRIPT`` (the server lost
        the script) means nothing was written: :meth:`put` it then. It reads no receipt (none
        can come before the publish it rides ahead of)."""
        keys = self._keys(lane)
        ttl = self._ttl("put", lane)
        return ("EVALSHA", PUT_SHA, len(keys), *keys, mail_id, payload, ttl, 0)

    @property
    def server(self) -> dict[str, Any]:
        """The connection settings of this outbox's client: ``host``, ``port``, ``username``,
        ``password``, ``db`` and the others redis-py keeps (empty for a Cluster client)."""
        pool = getattr(self.client, "connection_pool", None)
        return dict(getattr(pool, "connection_kwargs", None) or {})

    def settle(self) -> None:
        for writer in (self._later, self._later_clear):
            if writer is not None:
                writer.settle()

    def close(self) -> None:
        """Close the connections of the writes nobody waits for (their unread answers are
        dropped: the writes were sent); the next such write opens another."""
        for writer in (self._later, self._later_clear):
            if writer is not None:
                writer.close()

    def received(self, mail_id: str, lane: str) -> bool:
        keys = self._keys(lane)
        ttl = self._ttl("received", lane)
        return bool(self._clear(keys, [mail_id, 1, lane, ttl, _CLEARED_MS]))

    def received_later(self, mail_id: str, lane: str) -> None:
        keys = self._keys(lane)
        args = [mail_id, 1, lane, self._ttl("received", lane), _CLEARED_MS]
        if self._later_clear is None:
            self._clear(keys, args)
            return
        self._later_clear.write(keys, args)

    def unconfirmed_receipts(self) -> list[tuple[str, str]]:
        """The receipts (mail id, lane) made with :meth:`received_later` whose connection was
        lost before their answers were read (each once): applied or not, make them again."""
        if self._later_clear is None:
            return []
        return [(_text(args[0]), _text(args[2])) for _, args in self._later_clear.unconfirmed()]

    def discard(self, mail_id: str, lane: str) -> bool:
        keys = self._keys(lane)
        return bool(self._clear(keys, [mail_id, 0, lane, _TTL_MS, _CLEARED_MS]))

    def overdue(
        self,
        grace: float,
        *,
        drained: bool = False,
        limit: int = OVERDUE_LIMIT,
        slack: float = ORDER_SLACK,
    ) -> Overdue:
        keys = [self.payloads_key, self.received_key, *(self.lane_key(lane) for lane in LANES)]
        args = [_ms(grace), _ms(slack), int(drained), max(int(limit), 0), _TTL_MS, *LANES]
        waiting, *flat = self._overdue(keys, args)
        popped = [
            Pending(_text(flat[i]), _text(flat[i + 1]), float(flat[i + 2]) / 1000)
            for i in range(0, len(flat), 3)
        ]
        return Overdue(popped, int(waiting))

    def take(self, pending: Sequence[Pending], grace: float) -> list[tuple[Pending, bytes]]:
        if not pending:
            return []
        by_id = {entry.mail_id: entry for entry in pending}
        keys = [self.payloads_key, *(self.lane_key(entry.lane) for entry in by_id.values())]
        flat = self._take(keys, [_ms(grace), *by_id])
        taken = []
        for i in range(0, len(flat), 3):
            entry = by_id[_text(flat[i])]
            again = Pending(entry.mail_id, entry.lane, float(flat[i + 2]) / 1000)
            taken.append((again, bytes(flat[i + 1])))
        return taken

    def size(self) -> int:
        pipe = self.client.pipeline(transaction=False)
        for lane in LANES:
            pipe.zcard(self.lane_key(lane))
        return sum(int(n) for n in self._redis.call(pipe.execute))


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
