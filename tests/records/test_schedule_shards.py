"""The Redis schedule's shards: the mail id picks one, slots spread, takes fair across shards
(real Redis)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from mailer.records.schedule import SHARDS, RedisSchedule, ScheduleStats
from mailer.records.schedule.redis import shard_tags

pytestmark = [pytest.mark.redis]


@pytest.fixture
def shard_client(redis_url: str) -> Iterator[redis.Redis]:
    shard_client = redis.Redis.from_url(redis_url)
    yield shard_client
    shard_client.close()


def _calls(shard_client: redis.Redis) -> int:
    """Commands the server ran so far (``INFO commandstats``, calls inside scripts included),
    without the ``INFO`` calls themselves."""
    stats = shard_client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def test_each_shard_sits_in_its_own_range_of_slots() -> None:
    """Shard ``i`` of ``n`` hashes into the ``i``-th of ``n`` equal slot ranges, whatever the
    queue (so a Cluster of nodes with equal ranges holds an equal share); one shard is
    ``schedule:<queue>``."""
    for queue in ("mail", "mail-eu", "{odd}queue"):
        tags = shard_tags(queue, 6)
        assert len(set(tags)) == 6 and tags == shard_tags(queue, 6), "the same in every process"
        for i, tag in enumerate(tags):
            width = REDIS_CLUSTER_HASH_SLOTS / 6
            assert int(key_slot(tag.encode()) // width) == i
    assert shard_tags("mail", 1) == ["schedule:mail"]


def test_the_mail_id_picks_its_shard_and_ids_spread_evenly(
    shard_client: redis.Redis, redis_url: str
) -> None:
    """6 000 parked mails land about 1 000 in each shard (within 10 %), each where
    :meth:`RedisSchedule.shard_of` says; every call by mail id finds it there."""
    schedule = RedisSchedule(shard_client, redis_url, shards=SHARDS)
    pipe = shard_client.pipeline(transaction=False)
    for n in range(6000):
        mail_id = f"mail-{n:05d}-0123456789abcdef0123456789"
        shard = schedule.shard_of(mail_id)
        pipe.zadd(shard.due_key, {mail_id: 1})
    pipe.execute()
    sizes = [int(shard_client.zcard(shard.due_key)) for shard in schedule.shards]
    assert len(sizes) == SHARDS and sum(sizes) == 6000
    assert max(sizes) <= 1.1 * 6000 / SHARDS and min(sizes) >= 0.9 * 6000 / SHARDS
    shard_client.flushall()
    now = time.time()
    schedule.park("m", now + 60, b"P")
    assert shard_client.zscore(schedule.shard_of("m").due_key, "m") is not None
    assert schedule.payload("m") == b"P" and schedule.cancel("m") == b"P"
    assert schedule.stats() == ScheduleStats(0, 0, 0, None, 0)


def test_a_take_serves_every_shard_with_due_entries(
    shard_client: redis.Redis, redis_url: str
) -> None:
    """One shard holds a backlog of 200 due entries, two others one each: a take of 10 takes
    from all three (no shard waits behind another's backlog), earliest first; the next takes
    drain the backlog (the shards that filled their share get what is left)."""
    schedule = RedisSchedule(shard_client, redis_url, shards=SHARDS)
    now = time.time()
    ids = [f"m{n}" for n in range(2000)]
    by_shard: dict[int, list[str]] = {}
    for mail_id in ids:
        by_shard.setdefault(schedule.shards.index(schedule.shard_of(mail_id)), []).append(mail_id)
    busy, quiet1, quiet2 = by_shard[0][:200], by_shard[1][0], by_shard[2][0]
    for k, mail_id in enumerate(busy):
        schedule.park(mail_id, now - 100 + k * 0.01, b"x")  # the backlog is due first
    schedule.park(quiet1, now - 1, b"y")
    schedule.park(quiet2, now - 0.5, b"z")
    taken = schedule.take_due(limit=10, lease=30, ahead=0)
    names = [t.mail_id for t in taken]
    assert len(names) == 10 and quiet1 in names and quiet2 in names
    assert names[-2:] == [quiet1, quiet2], "earliest first"
    assert names[:8] == busy[:8]
    rest = schedule.take_due(limit=500, lease=30, ahead=0)
    assert [t.mail_id for t in rest] == busy[8:], "a full take from the one shard left"


def test_an_idle_poll_reads_two_first_entries_a_shard(
    shard_client: redis.Redis, redis_url: str
) -> None:
    """``next_due`` with nothing parked: two ``ZRANGE`` per shard, nothing else."""
    schedule = RedisSchedule(shard_client, redis_url, shards=SHARDS)
    before = _calls(shard_client)
    for _ in range(10):
        assert schedule.next_due() is None
    assert _calls(shard_client) - before == 10 * 2 * SHARDS


def test_a_pollers_read_takes_each_shards_parked_entries_at_most_every_stale_seconds(
    shard_client: redis.Redis, redis_url: str
) -> None:
    """``next_due(stale)``: after a first full read, only the watch sets are read (one
    ``ZRANGE`` a shard) until ``stale`` has passed; what this instance parks or releases is
    seen at once, an entry parked by another process only on the shard's next read; a watch
    written anywhere is seen at once."""
    poller = RedisSchedule(shard_client, redis_url, shards=SHARDS)
    other = RedisSchedule(shard_client, redis_url, shards=SHARDS)
    now = time.time()
    assert poller.next_due(3600) is None  # the first read: every set
    before = _calls(shard_client)
    assert poller.next_due(3600) is None
    assert _calls(shard_client) - before == SHARDS, "the watch sets only"
    other.park("elsewhere", now + 60, b"E")
    assert poller.next_due(3600) is None, "parked elsewhere: seen on the shard's next read"
    assert poller.next_due() == pytest.approx(now + 60, abs=0.01), "a full read sees it"
    poller.park("here", now + 30, b"H")
    assert poller.next_due(3600) == pytest.approx(now + 30, abs=0.01)
    other.watch("held", now + 10, b"W")
    assert poller.next_due(3600) == pytest.approx(now + 10, abs=0.01)
