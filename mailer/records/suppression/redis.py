"""The suppression list in Redis (the ledger's): one key per address,
``<ns>:suppressed:{<keyed hash of the address>}``, a JSON value ``{since, until, cause}`` with a
``PX`` expiry at ``until``. One command per method (``SET``, ``GET``, ``DEL``): no script."""

from __future__ import annotations

from typing import Any

from mailer.records.suppression.base import Suppression
from mailer.storage import RedisStore


class RedisSuppressionStore:
    """:class:`~mailer.records.suppression.base.SuppressionStore` in Redis; raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="ledger"``) when Redis is down."""

    def __init__(self, client: Any, url: str) -> None:
        self._redis = RedisStore(client, url, backend="ledger")

    @property
    def client(self) -> Any:
        """The redis-py client (shared with the ledger when built from it)."""
        return self._redis.client

    def put(self, key: str, entry: Suppression, seconds: float) -> None:
        px = max(int(seconds * 1000), 1)
        self._redis.call(self.client.set, key, entry.to_json(), px=px)

    def get(self, key: str) -> Suppression | None:
        raw = self._redis.call(self.client.get, key)
        return None if raw is None else Suppression.from_json(raw)

    def delete(self, key: str) -> bool:
        return bool(self._redis.call(self.client.delete, key))

    def shared_client(self) -> Any:
        return self.client
