"""The live policy's versions in Redis (the ledger's): ``<ns>:{policy}:version`` (the version in
force, a number) and ``<ns>:{policy}:versions`` (a hash: version -> JSON value). A worker reads
the first with one ``GET`` at most once a second; a new version is written by one script."""

from __future__ import annotations

from typing import Any

from mailer.storage import RedisStore

#: KEYS: the version, the versions. ARGV[1]: the value. The next version, stored and in force.
_PUT = """
local version = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2], tostring(version), ARGV[1])
return version
"""


class RedisPolicyStore:
    """:class:`~mailer.records.policy.base.PolicyStore` in Redis; raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="ledger"``) when Redis is down."""

    def __init__(self, client: Any, url: str, namespace: str = "mailguard") -> None:
        self._redis = RedisStore(client, url, backend="ledger")
        self._version_key = f"{namespace}:{{policy}}:version"
        self._versions_key = f"{namespace}:{{policy}}:versions"
        self._put = self._redis.script(_PUT)

    @property
    def client(self) -> Any:
        """The redis-py client."""
        return self._redis.client

    def version(self) -> int:
        raw = self._redis.call(self.client.get, self._version_key)
        return 0 if raw is None else int(raw)

    def get(self, version: int) -> str | bytes | None:
        raw: str | bytes | None = self._redis.call(
            self.client.hget, self._versions_key, str(version)
        )
        return raw

    def put(self, value: str) -> int:
        return int(self._put([self._version_key, self._versions_key], [value]))

    def history(self) -> list[tuple[int, str | bytes]]:
        found = self._redis.call(self.client.hgetall, self._versions_key)
        return sorted((int(k), v) for k, v in found.items())
