"""The Redis schedule on Redis Cluster and behind Sentinel, selected by URL (one hash tag)."""

from __future__ import annotations

import time

import redis

from devservers.redis_servers import RedisClusterServers, RedisSentinel, RedisServer
from mailer.records.schedule import RedisSchedule, Schedule, ScheduleShard, schedule_from_url


def _walk(schedule: Schedule) -> None:
    """Park, look, take, forget, bury and cancel; watch, run, release and forget: every script
    on this topology."""
    now = time.time()
    schedule.park("due", now - 1, b"D")
    schedule.park("bad", now - 1, b"\xff")
    schedule.park("later", now + 3600, b"L")
    assert schedule.next_due() is not None and schedule.next_due() <= now  # type: ignore[operator]
    taken = {t.mail_id: t.payload for t in schedule.take_due(limit=10, lease=30)}
    assert taken == {"due": b"D", "bad": b"\xff"}
    schedule.bury("bad")
    assert schedule.done(["due"]) == 1
    assert [(m, p) for m, _, p in schedule.scan()] == [("later", b"L")]
    assert schedule.dead_letters() == [("bad", b"\xff")]
    assert schedule.cancel("later") == b"L"
    stats = schedule.stats()
    assert (stats.parked, stats.promoting, stats.dead) == (0, 0, 1)
    schedule.watch("held", now - 1, b"H")
    schedule.watch("running", now - 1, b"R")
    assert schedule.running("running", 60) is True
    (taken_watch,) = schedule.take_due(limit=10, lease=30)
    assert (taken_watch.mail_id, taken_watch.watched) == ("held", True)
    assert schedule.release([taken_watch], 0) == 1
    assert schedule.stats().watched == 2
    assert schedule.forget("held") is True and schedule.forget("running") is True
    assert schedule.stats().watched == 0


def test_the_schedule_works_on_a_cluster(cluster: RedisClusterServers) -> None:
    """On a three-node Cluster every script runs: each shard's keys share one slot."""
    schedule = schedule_from_url(cluster.url)
    assert isinstance(schedule, RedisSchedule)
    _walk(schedule)
    schedule.client.close()


def test_parked_mails_spread_evenly_over_a_clusters_nodes(cluster: RedisClusterServers) -> None:
    """3 000 parked mails on a three-node Cluster: each node holds two shards and about a
    third of the mails (within 10 %)."""
    schedule = schedule_from_url(cluster.url)
    assert isinstance(schedule, RedisSchedule)
    now = time.time()
    for n in range(3000):
        schedule.park(f"mail-{n}", now + 3600, b"x")
    per_node = []
    for node in cluster.nodes:
        client = redis.Redis(port=node.port)
        per_node.append(sum(int(client.zcard(s.due_key)) for s in _owned(client, schedule)))
        client.close()
    assert sum(per_node) == 3000 and schedule.stats().parked == 3000
    assert max(per_node) <= 1.1 * 1000 and min(per_node) >= 0.9 * 1000, per_node
    for n in range(3000):
        schedule.cancel(f"mail-{n}")
    schedule.client.close()


def _owned(node: redis.Redis, schedule: RedisSchedule) -> list[ScheduleShard]:
    """The shards whose slot ``node`` serves (its ``myself`` line of ``CLUSTER NODES``)."""
    mine = []
    for shard in schedule.shards:
        slot = int(node.execute_command("CLUSTER", "KEYSLOT", shard.due_key))
        if _serves(node, slot):
            mine.append(shard)
    assert len(mine) == 2, "two shards a node"
    return mine


def _serves(node: redis.Redis, slot: int) -> bool:
    myself = next(
        line
        for line in node.execute_command("CLUSTER", "NODES").decode().splitlines()
        if "myself" in line
    )
    for part in myself.split()[8:]:
        low, _, high = part.partition("-")
        if int(low) <= slot <= int(high or low):
            return True
    return False


def test_the_schedule_works_behind_sentinel() -> None:
    """A ``redis+sentinel://`` URL finds the master and the schedule lives there."""
    master = RedisServer().start()
    sentinel = RedisSentinel(master).start()
    try:
        schedule = schedule_from_url(sentinel.url)
        _walk(schedule)
    finally:
        sentinel.cleanup()
        master.cleanup()
