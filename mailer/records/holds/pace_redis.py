"""The sender's pace in Redis (the holds'): ``<ns>:pace:{sender}`` (JSON) and its reservations
``<ns>:pace:{sender}:slots`` (a hash, mail tag -> slot) and the count per window it learned
``<ns>:pace:{sender}:learned`` (JSON, kept :data:`~mailer.records.holds.pace.LEARNED_FOR`),
changed by ``lua/pace.lua`` in one
atomic step per call; the hash tag ``{sender}`` keeps all three in one Redis Cluster slot."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mailer.records.holds.pace import (
    FORGET_AFTER,
    GIVEN_MAX,
    LEARNED_FOR,
    MARGIN,
    Pace,
    decode_pace,
    encode_pace,
    learned_pace,
)
from mailer.storage import RedisStore, lua_source

PACE_SCRIPT = lua_source("mailer.records.holds", "pace")


class RedisPaceStore:
    """:class:`~mailer.records.holds.pace.PaceStore` in Redis; raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="limiter"``) when Redis is down."""

    def __init__(self, client: Any, url: str) -> None:
        self._redis = RedisStore(client, url, backend="limiter")
        self._run = self._redis.script(PACE_SCRIPT)

    def start(self, key: str, pace: Pace) -> Pace:
        raw = self._run(_keys(key), ["s", repr(pace.since), encode_pace(pace), *_tail()])
        started = decode_pace(raw)
        assert started is not None  # the script answers the pace it set
        # ``pace`` as set, its times exact (the script's JSON keeps 14 digits)
        return learned_pace(pace, started.quota, started.window) if started.quota else pace

    def take(self, key: str, tag: str, now: float) -> tuple[float, Pace] | None:
        answer = self._run(_keys(key), ["t", repr(now), tag, *_tail()])
        if answer is None:
            return None
        slot, raw = answer
        pace = decode_pace(raw)
        assert pace is not None  # the script answers a pace with every slot
        return float(slot), pace

    def slow(self, key: str, now: float, asked: float, window: float = 0.0) -> Pace | None:
        answer = self._run(_keys(key), ["w", repr(now), repr(asked), *_tail(window)])
        if answer is None:
            return None
        raw, written = answer
        pace = decode_pace(raw)
        assert pace is not None  # the script answers a pace with its flag
        return replace(pace, written=written == 1)

    def get(self, key: str) -> Pace | None:
        return decode_pace(self._redis.call(self._redis.client.get, key))

    def get_many(self, keys: list[str]) -> list[Pace | None]:
        # one relay's paces share the hash tag: one MGET on Cluster too
        return [decode_pace(raw) for raw in self._redis.call(self._redis.client.mget, keys)]


def _keys(key: str) -> list[str]:
    return [key, f"{key}:slots", f"{key}:learned"]


def _tail(window: float = 0.0) -> list[str]:
    """The script's ARGV[4:]: forget, window, learned_for, margin, given_max."""
    return [repr(FORGET_AFTER), repr(window), repr(LEARNED_FOR), repr(MARGIN), str(GIVEN_MAX)]
