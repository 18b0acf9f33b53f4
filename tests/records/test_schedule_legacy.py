"""Schedules keyed by a broker URL's hash moved into the queue's one schedule (real Redis)."""

from __future__ import annotations

import time

import pytest
import redis

from mailer.records.schedule import RedisSchedule
from mailer.records.schedule.legacy import legacy_names, move_legacy

pytestmark = [pytest.mark.redis]


def test_every_entry_keeps_its_place_and_leaves_the_old_schedule(redis_url: str) -> None:
    """Given a parked, a watched, a promoting and a dead entry under ``mail@<hex>`` (and one of
    another queue), moving lands each in ``mail``'s schedule where it was: parked at its due
    time, watched at the watchdog's time, the promoting one due at once, the dead one dead;
    the other queue's schedule is left alone."""
    client = redis.Redis.from_url(redis_url)
    target = RedisSchedule(client, redis_url, queue="mail")
    # The broker-keyed layout: one hash tag each (one shard).
    old = RedisSchedule(client, redis_url, queue="mail@0123456789ab", shards=1)
    other = RedisSchedule(client, redis_url, queue="mail-eu@0123456789ab", shards=1)
    now = time.time()
    old.park("parked", now + 600, b"p")
    old.watch("watched", now + 300, b"w")
    old.park("promoting", now - 1, b"x")
    old.park("dead", now - 1, b"d")
    taken = old.take_due(limit=2, lease=30)
    assert {t.mail_id for t in taken} == {"promoting", "dead"}
    old.bury("dead")
    other.park("elsewhere", now + 600, b"e")

    assert legacy_names(client, "mailguard", "mail") == ["mail@0123456789ab"]
    assert move_legacy(target, "mailguard", "mail") == 4

    rows = {mail_id: (due, payload) for mail_id, due, payload in target.scan()}
    assert rows["parked"] == (pytest.approx(now + 600, abs=0.01), b"p")
    assert rows["watched"] == (pytest.approx(now + 300, abs=0.01), b"w")
    assert rows["promoting"][1] == b"x" and rows["promoting"][0] <= time.time()
    assert target.dead_letters() == [("dead", b"d")]
    assert target.stats().watched == 1
    assert list(old.scan()) == [] and old.dead_letters() == []
    assert legacy_names(client, "mailguard", "mail") == []
    assert other.payload("elsewhere") == b"e"
    client.close()
