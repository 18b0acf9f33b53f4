"""A lease in Redis: which one worker of a queue polls the schedule, the watchdog and the outbox.

One string key, ``<ns>:{lease:<name>}``, its value the holder's token (its hostname and a
random part; no address, no secret), its expiry the lease's end. A worker takes it with
``SET key token NX PX ttl``; its holder renews it with ``GETEX key PX ttl`` (one command: it
answers the value, so the holder sees whether it still holds it; a ``PEXPIRE`` and a ``GET`` in
one round trip on a Redis before 6.2); when the holder dies, its
key expires within ``ttl`` and the next worker that tries takes it.

The polling costs of a fleet: the holder one command each ``ttl / 3`` seconds, every other
worker one each ``retry`` seconds. A worker that finds a lease it held in another's hands
(it could not renew within ``ttl``: a pause, Redis unreachable) stops polling at once; two
workers may then both poll for up to one renewal, which the schedule's own promotion lease and
the ledger make harmless (a copy published twice is not sent twice).

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
        client = self._redis.client
        was, self._holding = self._holding, False  # until Redis says otherwise
        self._next = now + self.retry
        if was and self._renew(ms) == self.token.encode():
            self._holding = True  # renewed: the holder's one command
        elif self._redis.call(client.set, self.key, self.token, nx=True, px=ms):
            self._holding = True  # free (or lapsed): taken; the others' one command
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

    def release(self) -> None:
        """Give the lease up if this process holds it (another worker takes it at its next
        try, not after ``ttl``)."""
        if self._holding:
            client = self._redis.client
            if self._redis.call(client.get, self.key) == self.token.encode():
                self._redis.call(client.delete, self.key)
        self._holding = False
        self._next = -1.0
