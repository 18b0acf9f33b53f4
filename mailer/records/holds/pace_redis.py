"""The sender's pace in Redis (the holds'): ``<ns>:pace:{sender}`` (JSON) and its reservations
``<ns>:pace:{sender}:slots`` (a hash, mail tag -> slot), changed by ``lua/pace.lua`` in one
atomic step per call; the hash tag ``{sender}`` keeps both in one Redis Cluster slot."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mailer.records.holds.pace import FORGET_AFTER, Pace, decode_pace, encode_pace
from mailer.storage import RedisStore, lua_source

PACE_SCRIPT = lua_source("mailer.records.holds", "pace")


class RedisPaceStore:
    """:class:`~mailer.records.holds.pace.PaceStore` in Redis; raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="limiter"``) when Redis is down."""

    def __init__(self, client: Any, url: str) -> None:
        self._redis = RedisStore(client, url, backend="limiter")
        self._run = self._redis.script(PACE_SCRIPT)

    def start(self, key: str, pace: Pace) -> None:
        self._run(_keys(key), ["s", repr(pace.since), encode_pace(pace), repr(FORGET_AFTER)])

    def take(self, key: str, tag: str, now: float) -> tuple[float, Pace] | None:
        answer = self._run(_keys(key), ["t", repr(now), tag, repr(FORGET_AFTER)])
        if answer is None:
            return None
        slot, raw = answer
        pace = decode_pace(raw)
        assert pace is not None  # the script answers a pace with every slot
        return float(slot), pace

    def slow(self, key: str, now: float, asked: float) -> Pace | None:
        answer = self._run(_keys(key), ["w", repr(now), repr(asked), repr(FORGET_AFTER)])
        if answer is None:
            return None
        raw, written = answer
        pace = decode_pace(raw)
        assert pace is not None  # the script answers a pace with its flag
        return replace(pace, written=written == 1)

    def get(self, key: str) -> Pace | None:
        return decode_pace(self._redis.call(self._redis.client.get, key))


def _keys(key: str) -> list[str]:
    return [key, f"{key}:slots"]
