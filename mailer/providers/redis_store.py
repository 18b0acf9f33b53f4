"""Found providers in the limiter's Redis: every worker reads what one worker resolved.

Keys (``<storage key>`` is ``<namespace>:provider:{<keyed hash of the domain>}``, made by
:class:`~mailer.limits.keys.KeyHasher` like every other subject key, so no domain is stored in
clear in a key):

- ``<storage key>``: the JSON record ``{"name", "source", "until"}`` with a ``PX`` expiry at
  ``until`` (the DNS TTL clamped, :mod:`mailer.providers.finder`). The value holds the
  provider's name: a known provider's (``google``) or an MX host's registered domain.
- ``<storage key>:lock``: ``SET NX PX``, held by the one worker resolving the domain until it
  stores the answer (deleted in the same pipeline, after the record is written).
"""

from __future__ import annotations

from typing import Any

from mailer.clock import to_ms
from mailer.providers.store import Stored
from mailer.storage import RedisStore


class RedisProviderStore:
    """:class:`~mailer.providers.store.ProviderStore` in Redis (tested on a single server; a
    record and its lock share a hash tag, so one Cluster slot). Raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="limiter"``) when Redis is down."""

    def __init__(self, client: Any, url: str) -> None:
        self._redis = RedisStore(client, url, backend="limiter")

    @property
    def client(self) -> Any:
        """The redis-py client (shared with the limiter when built from it)."""
        return self._redis.client

    def get(self, key: str, now: float) -> Stored | None:
        stored = Stored.decode(self._redis.call(self._redis.client.get, key))
        return stored if stored is not None and now < stored.until else None

    def put(self, key: str, stored: Stored, now: float) -> None:
        ttl_ms = max(to_ms(stored.until) - to_ms(now), 1)
        pipe = self._redis.client.pipeline(transaction=False)  # one slot; order is enough
        pipe.set(key, stored.encode(), px=ttl_ms)
        pipe.delete(key + ":lock")
        self._redis.call(pipe.execute)

    def claim(self, key: str, now: float, seconds: float) -> bool:
        ttl_ms = max(to_ms(seconds), 1)
        client = self._redis.client
        return bool(self._redis.call(client.set, key + ":lock", "1", nx=True, px=ttl_ms))
