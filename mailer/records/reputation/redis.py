"""The sender reputation in Redis (the ledger's): ``lua/count.lua`` per count (one ``EVALSHA``;
a mail sent is counted in the same pipeline as the ledger's record: :meth:`RedisReputationStore.
run_together`), a short script for a resume, one pipelined round trip to attribute a
Message-ID.

Keys, all with the hash tag ``{reputation}`` (one Cluster slot), a bounded number per sender:
``<ns>:{reputation}:counts:<sender hash>`` (a hash: 24 buckets of three counters and their
sums), ``<ns>:{reputation}:pause:<sender hash>`` (JSON); and per bucket, for all senders,
``<ns>:{reputation}:marks:<bucket>`` (hashed Message-ID -> sender and kind, for the window).
"""

from __future__ import annotations

import hashlib
from typing import Any

import redis.exceptions

from mailer.records.reputation.base import (
    BUCKETS,
    Counted,
    Limits,
    Pause,
    Standing,
    oldest_bucket,
)
from mailer.storage import RedisStore, lua_source

COUNT_SCRIPT = lua_source("mailer.records.reputation", "count")
#: A script to run: its text, keys and arguments.
Script = tuple[str, list[str], list[Any]]

#: KEYS[1] the counts, KEYS[2] the pause; ARGV: the pause record to write (JSON without the
#: forgiven counts) and its PX. Deletes every bounce and complaint counter; answers the
#: counts forgiven and the mails sent: {sent, bounced, complained}.
_RESUME = """
local fields = redis.call('HKEYS', KEYS[1])
local sums = redis.call('HMGET', KEYS[1], 't:s', 't:b', 't:c')
for _, f in ipairs(fields) do
  local e = string.sub(f, -2)
  if e == ':b' or e == ':c' then redis.call('HDEL', KEYS[1], f) end
end
local record = cjson.decode(ARGV[1])
record['forgiven'] = {bounced = tonumber(sums[2] or 0), complained = tonumber(sums[3] or 0)}
redis.call('SET', KEYS[2], cjson.encode(record), 'PX', ARGV[2])
return {tonumber(sums[1] or 0), tonumber(sums[2] or 0), tonumber(sums[3] or 0)}
"""


class RedisReputationStore:
    """:class:`~mailer.records.reputation.base.ReputationStore` in Redis; raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="ledger"``) when Redis is down."""

    def __init__(self, client: Any, url: str, namespace: str = "mailguard") -> None:
        self._redis = RedisStore(client, url, backend="ledger")
        self._prefix = f"{namespace}:{{reputation}}"
        self._count = self._redis.script(COUNT_SCRIPT)
        self._resume = self._redis.script(_RESUME)

    def _keys(self, sid: str) -> list[str]:
        return [f"{self._prefix}:counts:{sid}", f"{self._prefix}:pause:{sid}"]

    def _marks(self, bucket: int) -> str:
        return f"{self._prefix}:marks:{bucket}"

    def count(
        self,
        sid: str,
        sender: str,
        events: str,
        *,
        now: float,
        limits: Limits,
        mark: tuple[str, str] | None = None,
    ) -> Counted:
        keys, args = self.count_command(sid, sender, events, now=now, limits=limits, mark=mark)
        return counted_of(sender, self._count(keys, args))

    def count_command(
        self,
        sid: str,
        sender: str,
        events: str,
        *,
        now: float,
        limits: Limits,
        mark: tuple[str, str] | None = None,
    ) -> tuple[list[str], list[Any]]:
        """The keys and arguments of :meth:`count`'s script (:data:`COUNT_SCRIPT`), for a
        caller that sends it in one pipeline with its own commands; read its reply with
        :func:`counted_of`."""
        t = limits.thresholds
        args = [
            repr(now),
            repr(limits.bucket),
            BUCKETS,
            events,
            sender,
            limits.minimum,
            -1 if t.complaint is None else repr(t.complaint),
            -1 if t.bounce is None else repr(t.bounce),
            "" if mark is None else mark[0],
            "" if mark is None else mark[1],
        ]
        return [*self._keys(sid), self._marks(limits.bucket_of(now))], args

    @property
    def client(self) -> Any:
        """The redis-py client (the ledger's when built from it)."""
        return self._redis.client

    def run_together(self, scripts: list[Script]) -> list[Any]:
        """Each ``(source, keys, args)`` script with ``EVALSHA``, in one pipeline on
        :attr:`client` (one round trip; not a transaction): their replies, an error as its
        exception. A script the server lost is loaded and run again alone.
        :class:`~mailer.errors.BackendUnavailable` when Redis is down."""
        client = self._redis.client
        shas = [hashlib.sha1(source.encode()).hexdigest() for source, _, _ in scripts]  # noqa: S324
        pipe = client.pipeline(transaction=False)
        for sha, (_, keys, args) in zip(shas, scripts, strict=True):
            pipe.evalsha(sha, len(keys), *keys, *args)
        replies: list[Any] = self._redis.call(pipe.execute, raise_on_error=False)
        for at, reply in enumerate(replies):
            if isinstance(reply, redis.exceptions.NoScriptError):  # it did not run: load, run
                source, keys, args = scripts[at]
                self._redis.call(client.script_load, source)
                replies[at] = self._redis.call(client.evalsha, shas[at], len(keys), *keys, *args)
        return replies

    def attribute(self, mark: str, now: float, limits: Limits) -> tuple[str, str] | None:
        newest = limits.bucket_of(now)
        pipe = self._redis.client.pipeline(transaction=False)
        for bucket in range(newest, oldest_bucket(newest) - 1, -1):
            pipe.hget(self._marks(bucket), mark)
        for found in self._redis.call(pipe.execute):
            if found is not None:
                sender, _, kind = _text(found).partition("\t")
                return sender, kind
        return None

    def resume(self, sid: str, sender: str, by: str, now: float, limits: Limits) -> Standing:
        self.count(sid, sender, "", now=now, limits=limits)
        record = Pause(False, sender, lifted_at=now, lifted_by=by)
        keys, args = self._keys(sid), [record.to_json(), limits.keep_ms]
        sent, bounced, complained = self._resume(keys, args)
        forgiven = {"bounced": int(bounced), "complained": int(complained)}
        return Standing(sender, int(sent), 0, 0, Pause(**{**vars(record), "forgiven": forgiven}))

    def senders(self) -> list[tuple[str, str]]:
        client = self._redis.client
        start = len(f"{self._prefix}:counts:")
        found: list[tuple[str, str]] = []
        with self._redis.unavailable():
            for key in client.scan_iter(match=f"{self._prefix}:counts:*", count=500):
                name = client.hget(key, "sender")
                if name is not None:
                    found.append((_text(key)[start:], _text(name)))
        return found

    def state_read(self, sid: str) -> tuple[Any, str] | None:
        return self._redis.client, self._keys(sid)[1]

    def pause_of(self, sid: str) -> Pause | None:
        return Pause.from_json(self._redis.call(self._redis.client.get, self._keys(sid)[1]))


def counted_of(sender: str, reply: Any) -> Counted:
    """What :data:`COUNT_SCRIPT`'s reply says."""
    sent, bounced, complained, transition, raw = reply
    pause = Pause.from_json(raw) if raw else None
    standing = Standing(sender, int(sent), int(bounced), int(complained), pause)
    return Counted(standing, _text(transition))  # type: ignore[arg-type]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
