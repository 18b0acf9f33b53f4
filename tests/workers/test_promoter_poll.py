"""The promoter's idle poll on a sharded schedule: what it reads (command counts, real Redis)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from devservers.celery_worker import client_app, worker_env
from mailer.records.schedule import SHARDS, RedisSchedule
from mailer.settings import Settings
from workers.polling.promoter import DUE_STALE, Promoter
from workers.waiting.payload import Parked

pytestmark = [pytest.mark.redis]


def _calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


@pytest.fixture
def env(redis_url: str) -> dict[str, str]:
    return worker_env(redis_url, "memory://")


def _promoter(env: dict[str, str], schedule: RedisSchedule, **extra: str) -> Any:
    app = client_app(env | extra)
    return app, Promoter(app, schedule, Settings.from_env(env | extra))


@pytest.fixture
def schedule(env: dict[str, str]) -> Iterator[RedisSchedule]:
    url = env["MAILGUARD_LIMITER_URL"]
    client = redis.Redis.from_url(url)
    yield RedisSchedule(client, url, shards=SHARDS)
    client.close()


def test_an_idle_poll_reads_the_watches_and_not_every_parked_set(
    env: dict[str, str], schedule: RedisSchedule
) -> None:
    """With nothing due, after its first poll a promoter reads one ``ZRANGE`` a shard (the
    watches) per poll, the parked sets only every ``DUE_STALE`` seconds; a mail parked due
    within a second by this process is taken at the next poll."""
    app, promoter = _promoter(env, schedule)
    try:
        assert promoter._stale == DUE_STALE  # PARK_AFTER 30 s: well above it
        assert promoter.promote_once() == 0
        before = _calls(schedule.client)
        assert promoter.promote_once() == 0
        assert promoter.promote_once() == 0
        assert _calls(schedule.client) - before == 2 * SHARDS
        entry = Parked("m1", ["ada@example.com"], {"mail_id": "m1"}, time.time() - 1)
        schedule.park("m1", entry.due, entry.encode())
        assert promoter.promote_once() == 1
        assert schedule.stats().parked == 0
    finally:
        promoter.stop()
        app.close()


def test_a_short_park_after_reads_every_set_each_poll(
    env: dict[str, str], schedule: RedisSchedule
) -> None:
    """``MAILGUARD_PARK_AFTER`` 1 s leaves no room for an older read: every poll reads every
    shard's first parked and watched entry."""
    app, promoter = _promoter(env, schedule, MAILGUARD_PARK_AFTER="1s")
    try:
        assert promoter._stale == 0.0
        promoter.promote_once()
        before = _calls(schedule.client)
        promoter.promote_once()
        assert _calls(schedule.client) - before == 2 * SHARDS
    finally:
        promoter.stop()
        app.close()
