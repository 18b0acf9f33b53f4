"""The suppression list in Redis (the ledger's): one key per address,
``<ns>:suppressed:{<keyed hash of the address>}``, a JSON value ``{since, until, cause, source}``
with a ``PX`` expiry at ``until``. One command per method (``SET``, ``GET``, ``DEL``), and one
short script for :meth:`RedisSuppressionStore.put_longer` (read, compare and write at once)."""

from __future__ import annotations

from typing import Any

from mailer.records.suppression.base import Suppression
from mailer.storage import RedisStore

#: KEYS[1] the entry; ARGV: the new value, its PX, now and its until. Keeps an entry in force
#: that lasts as long; answers the value kept.
_PUT_LONGER = """
local old = redis.call('GET', KEYS[1])
if old then
  local ok, entry = pcall(cjson.decode, old)
  if ok and type(entry) == 'table' and tonumber(entry['until']) then
    local old_until = tonumber(entry['until'])
    if old_until > tonumber(ARGV[3]) and old_until >= tonumber(ARGV[4]) then return old end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]
"""


class RedisSuppressionStore:
    """:class:`~mailer.records.suppression.base.SuppressionStore` in Redis; raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="ledger"``) when Redis is down."""

    def __init__(self, client: Any, url: str) -> None:
        self._redis = RedisStore(client, url, backend="ledger")
        self._put_longer = self._redis.script(_PUT_LONGER)

    @property
    def client(self) -> Any:
        """The redis-py client (shared with the ledger when built from it)."""
        return self._redis.client

    def put(self, key: str, entry: Suppression, seconds: float) -> None:
        px = max(int(seconds * 1000), 1)
        self._redis.call(self.client.set, key, entry.to_json(), px=px)

    def put_longer(self, key: str, entry: Suppression, seconds: float, now: float) -> Suppression:
        px = max(int(seconds * 1000), 1)
        kept = self._put_longer([key], [entry.to_json(), px, repr(now), repr(entry.until)])
        return Suppression.from_json(kept)

    def get(self, key: str) -> Suppression | None:
        raw = self._redis.call(self.client.get, key)
        return None if raw is None else Suppression.from_json(raw)

    def delete(self, key: str) -> bool:
        return bool(self._redis.call(self.client.delete, key))

    def scan(self, prefix: str) -> list[tuple[str, Suppression]]:
        with self._redis.unavailable():
            keys = list(self.client.scan_iter(match=prefix + "*", count=500))
            values = self.client.mget(keys) if keys else []
        return [
            (key.decode() if isinstance(key, bytes) else key, Suppression.from_json(raw))
            for key, raw in zip(keys, values, strict=True)
            if raw is not None
        ]

    def shared_client(self) -> Any:
        return self.client
