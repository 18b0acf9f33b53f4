"""Mail ids in the Redis schedule (mailer/records/schedule/ids.py): a UUID stored as 17 bytes,
any other id as its text."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from mailer.records.schedule import RedisSchedule
from mailer.records.schedule.base import Taken
from mailer.records.schedule.ids import mail_id_of, stored

pytestmark = pytest.mark.redis

MAIL = "8b703fcb-d78c-4254-8175-1fa7b7d6be70"


def test_a_uuid_is_17_bytes_and_any_other_id_its_text() -> None:
    """A UUID in its usual text (lowercase) is ``0xff`` and its 16 bytes; an upper-case UUID, a
    caller's own id and a 17-byte text are their text; each name reads back as the id."""
    assert stored(MAIL) == b"\xff" + uuid.UUID(MAIL).bytes
    for other in (MAIL.upper(), "order-1234", "x" * 17, "été-12345678901"):
        assert stored(other) == other.encode()
        assert mail_id_of(stored(other)) == other
    assert mail_id_of(stored(MAIL)) == MAIL == mail_id_of(MAIL.encode()) == mail_id_of(MAIL)


@pytest.fixture
def ids_schedule(redis_url: str) -> Iterator[RedisSchedule]:
    client = redis.Redis.from_url(redis_url)
    yield RedisSchedule(client, redis_url, queue="mail")
    client.close()


def _members(ids_schedule: RedisSchedule) -> list[bytes]:
    shard = ids_schedule.shards[0]
    return sorted(ids_schedule.client.hkeys(shard.payloads_key))


def test_a_parked_uuid_is_named_by_17_bytes(ids_schedule: RedisSchedule) -> None:
    """Parked, its ``due`` member and ``payloads`` field are 17 bytes; it is taken, read and
    scanned under its text id."""
    ids_schedule.park(MAIL, 10.0, b"p")
    assert _members(ids_schedule) == [stored(MAIL)]
    assert ids_schedule.client.zrange(ids_schedule.shards[0].due_key, 0, -1) == [stored(MAIL)]
    assert ids_schedule.payload(MAIL) == b"p"
    assert [(m, p) for m, _, p in ids_schedule.scan()] == [(MAIL, b"p")]
    (taken,) = ids_schedule.take_due(ahead=0.0)
    assert taken == Taken(MAIL, b"p", False)
    assert ids_schedule.done([MAIL]) == 1 and _members(ids_schedule) == []
