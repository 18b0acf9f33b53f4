"""Mail ids in the Redis schedule (mailer/records/schedule/ids.py): a UUID stored as 17 bytes,
any other id as its text, and an entry an earlier version wrote under a UUID's text still
found by every method until it leaves."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from mailer.records.schedule import RedisSchedule
from mailer.records.schedule.base import Taken
from mailer.records.schedule.ids import earlier, mail_id_of, stored

pytestmark = pytest.mark.redis

MAIL = "8b703fcb-d78c-4254-8175-1fa7b7d6be70"


def test_a_uuid_is_17_bytes_and_any_other_id_its_text() -> None:
    """A UUID in its usual text (lowercase) is ``0xff`` and its 16 bytes; an upper-case UUID, a
    caller's own id and a 17-byte text are their text; each name reads back as the id."""
    assert stored(MAIL) == b"\xff" + uuid.UUID(MAIL).bytes and earlier(MAIL) == MAIL.encode()
    for other in (MAIL.upper(), "order-1234", "x" * 17, "été-12345678901"):
        assert stored(other) == other.encode() and earlier(other) == b""
        assert mail_id_of(stored(other)) == other
    assert mail_id_of(stored(MAIL)) == MAIL == mail_id_of(MAIL.encode()) == mail_id_of(MAIL)


@pytest.fixture
def schedule(redis_url: str) -> Iterator[RedisSchedule]:
    client = redis.Redis.from_url(redis_url)
    yield RedisSchedule(client, redis_url, queue="mail")
    client.close()


def _members(schedule: RedisSchedule) -> list[bytes]:
    shard = schedule.shards[0]
    return sorted(schedule.client.hkeys(shard.payloads_key))


def _old_park(schedule: RedisSchedule, mail_id: str, due_ms: int, *, watch: bool = False) -> None:
    """An entry as an earlier version wrote it: the mail id's text."""
    shard = schedule.shards[0]
    client = schedule.client
    client.zadd(shard.watch_key if watch else shard.due_key, {mail_id: due_ms})
    client.hset(shard.payloads_key, mail_id, b"old")


def test_a_parked_uuid_is_named_by_17_bytes(schedule: RedisSchedule) -> None:
    """Parked, its ``due`` member and ``payloads`` field are 17 bytes; it is taken, read and
    scanned under its text id."""
    schedule.park(MAIL, 10.0, b"p")
    assert _members(schedule) == [stored(MAIL)]
    assert schedule.client.zrange(schedule.shards[0].due_key, 0, -1) == [stored(MAIL)]
    assert schedule.payload(MAIL) == b"p"
    assert [(m, p) for m, _, p in schedule.scan()] == [(MAIL, b"p")]
    (taken,) = schedule.take_due(ahead=0.0)
    assert taken == Taken(MAIL, b"p", False)
    assert schedule.done([MAIL]) == 1 and _members(schedule) == []


def test_an_entry_an_earlier_version_wrote_is_found_by_every_method(
    schedule: RedisSchedule,
) -> None:
    """Taken, released, taken and done; read; scanned; cancelled; buried; a watch moved by
    ``running`` and forgotten; and parked or watched again under the new name, where the old
    one goes."""
    _old_park(schedule, MAIL, 10_000)
    assert schedule.payload(MAIL) == b"old"
    assert [(m, s) for m, s, _ in schedule.scan()] == [(MAIL, 10.0)]
    (taken,) = schedule.take_due(ahead=0.0)
    assert taken == Taken(MAIL, b"old", False)
    assert schedule.release([taken], 0.0) == 1
    (again,) = schedule.take_due(ahead=0.0)
    assert schedule.done([again.mail_id]) == 1 and _members(schedule) == []

    _old_park(schedule, MAIL, 10_000)
    assert schedule.cancel(MAIL) == b"old" and _members(schedule) == []
    _old_park(schedule, MAIL, 10_000)
    schedule.bury(MAIL)
    assert _members(schedule) == [] and schedule.dead_letters() == [(MAIL, b"old")]
    schedule.client.delete(schedule.shards[0].dead_key)

    _old_park(schedule, MAIL, 10_000, watch=True)
    assert schedule.running(MAIL, 60.0) is True
    score = schedule.client.zscore(schedule.shards[0].watch_key, MAIL)
    assert score is not None and score > 10_000
    assert schedule.forget(MAIL) is True and _members(schedule) == []

    for rewrite in (schedule.park, schedule.watch):
        _old_park(schedule, MAIL, 10_000, watch=rewrite is schedule.park)
        rewrite(MAIL, 20.0, b"new")
        assert _members(schedule) == [stored(MAIL)], rewrite
        assert schedule.payload(MAIL) == b"new"
        assert schedule.stats().parked + schedule.stats().watched == 1
        schedule.forget(MAIL)
