"""Holds in Redis (the limiter's): one key per hold, a JSON value ``{until, level, cause,
since, stated}`` with a ``PX`` expiry one length after its end, set by the script
``lua/put.lua``; the transport's hold (kept until lifted) by ``lua/transport.lua``; the evidence
of failures across recipients in a sorted set, counted by ``lua/witness.lua``.

Keys: ``<ns>:hold:sender``, ``<ns>:hold:provider:<google|microsoft|yahoo>``,
``<ns>:hold:{transport}[:<sender's keyed hash>]``,
``<ns>:hold:{<keyed hash of a recipient's limit key>}`` and ``<ns>:hold:evidence`` (members:
recipients' keyed hashes; no address in clear). On Cluster the holds live in different slots:
they are read with a pipeline, not one ``MGET``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mailer.records.holds.base import CAUSE_CHARS, Hold, decode_hold
from mailer.storage import RedisStore, lua_source

PUT_SCRIPT = lua_source("mailer.records.holds", "put")
WITNESS_SCRIPT = lua_source("mailer.records.holds", "witness")
TRANSPORT_SCRIPT = lua_source("mailer.records.holds", "transport")


class RedisHoldStore:
    """:class:`~mailer.records.holds.base.HoldStore` in Redis; raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="limiter"``: holds live where the
    limiter lives) when Redis is down."""

    def __init__(self, client: Any, url: str, *, cluster: bool = False) -> None:
        self._redis = RedisStore(client, url, backend="limiter")
        self._cluster = cluster  # keys in other slots: a pipeline, not MGET
        self._put = self._redis.script(PUT_SCRIPT)
        self._witness = self._redis.script(WITNESS_SCRIPT)
        self._transport = self._redis.script(TRANSPORT_SCRIPT)

    @property
    def client(self) -> Any:
        """The redis-py client (shared with the limiter or the ledger when built from it)."""
        return self._redis.client

    def put(
        self,
        key: str,
        now: float,
        seconds: float,
        max_hold: float,
        cause: str,
        *,
        asked: float | None = None,
        stated: bool = False,
    ) -> Hold:
        args = [repr(now), repr(seconds), repr(max_hold), cause[:CAUSE_CHARS]]
        args += [repr(now if asked is None else asked), "1" if stated else "0"]
        raw, written = self._put([key], args)
        hold = decode_hold(raw)
        assert hold is not None  # the script answers a hold with its flag
        return replace(hold, written=written == 1)

    def witness(self, key: str, member: str, now: float, window: float, count: int) -> int:
        return int(self._witness([key], [repr(now), repr(window), str(count), member]))

    def start(self, key: str, now: float, seconds: float, cause: str, *, keep: float) -> Hold:
        args = ["start", repr(now), repr(seconds), cause[:CAUSE_CHARS], str(int(keep * 1000))]
        raw, written = self._transport([key], args)
        hold = decode_hold(raw)
        assert hold is not None  # start always answers a hold
        return replace(hold, written=written == 1)

    def claim(self, key: str, now: float, max_hold: float, *, keep: float) -> Hold | None:
        args = ["claim", repr(now), repr(max_hold), "", str(int(keep * 1000))]
        raw, written = self._transport([key], args)
        hold = decode_hold(raw)
        return None if hold is None else replace(hold, written=written == 1)

    def lift(self, key: str) -> bool:
        return bool(self._redis.call(self.client.delete, key))

    def scan(self, prefix: str) -> list[tuple[str, Hold]]:
        with self._redis.unavailable():
            keys = list(self.client.scan_iter(match=_glob(prefix) + "*", count=500))
            if self._cluster:  # one slot ({transport}), but keys from a scan of every node
                raws = [self.client.get(key) for key in keys]
            else:
                raws = self.client.mget(keys) if keys else []
        found = []
        for key, raw in zip(keys, raws, strict=True):
            hold = decode_hold(raw)
            if hold is not None:
                found.append((key.decode() if isinstance(key, bytes) else str(key), hold))
        return found

    def get(self, keys: list[str]) -> list[Hold | None]:
        if self._cluster and len(keys) > 1:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.get(key)
            raws = self._redis.call(pipe.execute)
        else:
            raws = self._redis.call(self.client.mget, keys)
        return [decode_hold(raw) for raw in raws]

    def shared_client(self) -> Any:
        return None if self._cluster else self.client


def _glob(prefix: str) -> str:
    """``prefix`` as a literal in a ``SCAN MATCH`` pattern (its glob characters escaped)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in prefix)
