"""A lease in Redis: which one worker of a queue polls the schedule, the watchdog and the outbox.

One string key, ``<ns>:{lease:<name>}``, its value the holder's token (``host:pid:random``; no
address, no secret), its expiry the lease's end.

- **A try** (a worker that does not hold it): ``SET key token NX PX ttl GET`` (Redis 7.0+; a
  ``SET ... NX`` and, refused, a ``GET`` before), which takes a free lease or answers the
  holder's token. A holder on this host whose process is gone (``kill(pid, 0)``: a worker
  killed and started again) is not waited for: its token is deleted (only while it is still
  the value) and the lease taken at once. A holder elsewhere that died is replaced once its
  key expires, within ``ttl`` plus one ``retry``.
- **A renewal** (the holder): ``GETEX key PX ttl`` (Redis 6.2+; a ``PEXPIRE`` and a ``GET`` in
  one round trip before), whose answer tells the holder whether it still holds it.

The polling costs of a fleet: the holder one command each ``ttl / 3`` seconds, every other
worker one each ``retry`` seconds. A worker that finds a lease it held in another's hands
(it could not renew within ``ttl``: a pause, Redis unreachable) stops polling at once; two
workers may then both poll for up to one renewal, which the schedule's own promotion lease and
the ledger make harmless (a copy published twice is not sent twice). Containers that share a
hostname but not a process namespace may take a live holder's lease: the same harmless overlap.

Not for mutual exclusion that must be exact: only for keeping a poll to one process.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from typing import Any

import redis

from mailer.clock import Clock
from mailer.storage import RedisStore

#: Seconds a lease lasts without renewal (its holder renews it every third of that).
TTL = 3.0
#: Seconds between two tries of a worker that does not hold the lease.
RETRY = 2.0
#: Deletes KEYS[1] if its value is ARGV[1]: a gone holder's token, not one that took it since.
_DELETE_IF = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


def _runs(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (a zombie not yet reaped still does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: it runs
        return True
    return True


class Lease:
    """The lease ``name`` on ``client`` (``url``: the ledger's, for error messages). :meth:`held`
    is cheap to call often: it asks Redis at most once a renewal or a retry. Raises
    :class:`~mailer.errors.BackendUnavailable` when Redis is down (then not held)."""

    def __init__(
        self,
        client: Any,
        url: str,
        name: str,
        *,
        namespace: str = "mailguard",
        ttl: float = TTL,
        retry: float = RETRY,
        clock: Clock = time.monotonic,
    ) -> None:
        if ttl <= 0 or retry <= 0:
            raise ValueError(f"a lease needs a positive ttl and retry, got {ttl} and {retry}")
        self._redis = RedisStore(client, url, backend="ledger")
        tag = "".join(c for c in name if c not in "{}")
        self.key = f"{namespace}:{{lease:{tag}}}"
        self.token = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.ttl, self.retry = ttl, retry
        self._clock = clock
        self._holding = False
        self._next = -1.0  # clock: the next time Redis is asked
        self._getex = True  # whether the server knows GETEX
        self._set_get = True  # whether the server takes SET with both NX and GET

    @property
    def holding(self) -> bool:
        """Whether this process held the lease at its last look (no Redis call)."""
        return self._holding

    def held(self) -> bool:
        """Whether this process holds the lease now: renewed or taken when due."""
        now = self._clock()
        if now < self._next:
            return self._holding
        ms = max(1, round(self.ttl * 1000))
        was, self._holding = self._holding, False  # until Redis says otherwise
        self._next = now + self.retry
        if was and self._renew(ms) == self.token.encode():
            self._holding = True  # renewed: the holder's one command
        else:
            holder = self._take(ms)  # the others' one command
            self._holding = holder is None or (self._gone(holder) and self._take(ms) is None)
        if self._holding:
            self._next = now + self.ttl / 3
        return self._holding

    def _renew(self, ms: int) -> Any:
        """The key's value, its expiry set to ``ms`` from now: one ``GETEX`` (Redis 6.2+), or a
        ``PEXPIRE`` and a ``GET`` in one round trip on a Redis without it."""
        client = self._redis.client
        if self._getex:
            try:
                return self._redis.call(client.getex, self.key, px=ms)
            except redis.ResponseError:  # unknown command: an older Redis
                self._getex = False
        pipe = client.pipeline(transaction=False)
        pipe.pexpire(self.key, ms)
        pipe.get(self.key)
        return self._redis.call(pipe.execute)[1]

    def _take(self, ms: int) -> bytes | None:
        """Take the lease if it is free (None), else the holder's token: one ``SET ... NX GET``
        (Redis 7.0+), or a ``SET ... NX`` and, refused, a ``GET`` on an older Redis."""
        client = self._redis.client
        if self._set_get:
            try:
                holder = self._redis.call(
                    client.set, self.key, self.token, nx=True, px=ms, get=True
                )
                return None if holder is None else bytes(holder)
            except redis.ResponseError:  # NX with GET: Redis 7.0+
                self._set_get = False
        if self._redis.call(client.set, self.key, self.token, nx=True, px=ms):
            return None
        holder = self._redis.call(client.get, self.key)
        return b"" if holder is None else bytes(holder)  # b"": expired between the two

    def _gone(self, holder: bytes) -> bool:
        """Whether ``holder`` (a token) is a process of this host that no longer runs; if so its
        token is deleted (only while it is still the key's value)."""
        parts = holder.decode(errors="replace").rsplit(":", 2)  # host, pid, random
        if len(parts) != 3:
            return False
        host, pid, _ = parts
        if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
            return False
        if _runs(int(pid)):
            return False
        client = self._redis.client
        return bool(self._redis.call(client.eval, _DELETE_IF, 1, self.key, holder))

    def release(self) -> None:
        """Give the lease up if this process holds it (another worker takes it at its next
        try, not after ``ttl``)."""
        if self._holding:
            client = self._redis.client
            if self._redis.call(client.get, self.key) == self.token.encode():
                self._redis.call(client.delete, self.key)
        self._holding = False
        self._next = -1.0
