"""The kept failed mails in Redis (the ledger's): one short script (``EVALSHA``) per write, so
that a payload is taken by one caller only.

Keys, all with the hash tag ``{failed}`` (one Cluster slot), named by mail id (never an
address): ``<ns>:{failed}:kept:<mail id>`` (the payload, with the retention as its TTL),
``<ns>:{failed}:retried:<mail id>`` (the mail id it was retried as, the same TTL) and
``<ns>:{failed}:index`` (a sorted set of the kept mail ids by the time they failed, for
``--since``; its entries whose payload expired are dropped as they are met).
"""

from __future__ import annotations

from typing import Any

from mailer.records.failed.base import SINCE_LIMIT
from mailer.storage import RedisStore

KEEP_SCRIPT = """
-- Keep a failed mail's payload, unless it is kept already or was retried.
-- KEYS[1] the payload, KEYS[2] the retried marker, KEYS[3] the index (a sorted set of mail ids
-- by the time they failed). ARGV[1] the payload, ARGV[2] when it failed (epoch s), ARGV[3] the
-- retention (ms), ARGV[4] the mail id. Answers 1 when kept now, else 0.
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[4])
-- Entries that failed a whole retention before this one are gone: their payload has expired.
local before = tonumber(ARGV[2]) - tonumber(ARGV[3]) / 1000
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. before)
redis.call('PEXPIRE', KEYS[3], ARGV[3])
return 1
"""

TAKE_SCRIPT = """
-- Take a kept payload for a retry: it goes, and a marker names the mail id it was retried as.
-- KEYS[1] the payload, KEYS[2] the retried marker, KEYS[3] the index. ARGV[1] the new mail id,
-- ARGV[2] the marker's retention (ms), ARGV[3] the mail id. Answers the payload, or nil when
-- nothing is kept (two callers at once: one gets it).
local payload = redis.call('GET', KEYS[1])
if not payload then
  return false
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[3], ARGV[3])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return payload
"""

#: KEYS as in ``keep.lua``; ARGV the payload, failed at, retention (ms), mail id.
_GIVE_BACK = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
redis.call('DEL', KEYS[2])
"""

#: KEYS[1] the index, ARGV[1] since (epoch s), ARGV[2] the limit, ARGV[3] the payload keys'
#: prefix. Answers the kept mail ids that failed since, oldest first; drops the expired ones.
_SINCE = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf', 'LIMIT', 0, ARGV[2])
local kept = {}
for _, id in ipairs(ids) do
  if redis.call('EXISTS', ARGV[3] .. id) == 1 then
    kept[#kept + 1] = id
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return kept
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class RedisFailedStore:
    """:class:`~mailer.records.failed.base.FailedStore` in Redis; raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="ledger"``) when Redis is down."""

    def __init__(self, client: Any, url: str, namespace: str = "mailguard") -> None:
        self._redis = RedisStore(client, url, backend="ledger")
        self.prefix = f"{namespace}:{{failed}}"
        self._keep = self._redis.script(KEEP_SCRIPT)
        self._take = self._redis.script(TAKE_SCRIPT)
        self._give_back = self._redis.script(_GIVE_BACK)
        self._since = self._redis.script(_SINCE)

    @property
    def client(self) -> Any:
        return self._redis.client

    def kept_key(self, mail_id: str) -> str:
        return f"{self.prefix}:kept:{mail_id}"

    def retried_key(self, mail_id: str) -> str:
        return f"{self.prefix}:retried:{mail_id}"

    @property
    def index_key(self) -> str:
        return f"{self.prefix}:index"

    def _keys(self, mail_id: str) -> list[str]:
        return [self.kept_key(mail_id), self.retried_key(mail_id), self.index_key]

    def keep(self, mail_id: str, payload: bytes, *, failed_at: float, retention: float) -> bool:
        args = [payload, repr(failed_at), _ms(retention), mail_id]
        return bool(self._keep(self._keys(mail_id), args))

    def take(self, mail_id: str, retried_as: str, retention: float) -> bytes | None:
        taken = self._take(self._keys(mail_id), [retried_as, _ms(retention), mail_id])
        return None if taken is None else bytes(taken)

    def give_back(
        self, mail_id: str, payload: bytes, *, failed_at: float, retention: float
    ) -> None:
        args = [payload, repr(failed_at), _ms(retention), mail_id]
        self._give_back(self._keys(mail_id), args)

    def retried_as(self, mail_id: str) -> str | None:
        value = self._redis.call(self.client.get, self.retried_key(mail_id))
        return None if value is None else _text(value)

    def failed_at(self, mail_id: str) -> float | None:
        def read(pipe: Any) -> Any:
            pipe.exists(self.kept_key(mail_id))
            pipe.zscore(self.index_key, mail_id)
            return pipe.execute()

        exists, score = self._redis.call(read, self.client.pipeline(transaction=False))
        return float(score) if exists and score is not None else None

    def failed_since(self, since: float, limit: int = SINCE_LIMIT) -> list[str]:
        ids = self._since([self.index_key], [repr(since), limit, self.kept_key("")])
        return [_text(mail_id) for mail_id in ids]
