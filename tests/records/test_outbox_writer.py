"""The outbox's writes nobody waits for (:mod:`mailer.records.outbox.writer`) on a real Redis:
when their answers are read, and what becomes of a write the server refused for want of its
script (``SCRIPT FLUSH`` on a live connection)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis

from mailer.records.outbox import RedisOutbox, outbox_from_url
from mailer.records.outbox import writer as writer_module

pytestmark = [pytest.mark.redis]

LANE_KEY = "mailguard:{outbox:mail}:at:4"


@pytest.fixture
def writer_box(redis_url: str) -> Iterator[RedisOutbox]:
    store = outbox_from_url(redis_url, client=redis.Redis.from_url(redis_url), queue="mail")
    assert isinstance(store, RedisOutbox)
    yield store
    store.close()


def _unread(writer_box: RedisOutbox) -> int:
    assert writer_box._later is not None
    return len(writer_box._later._unread)


def test_a_write_well_after_the_oldest_unread_reads_the_answers_first(
    writer_box: RedisOutbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given one write unread, when the next comes more than ``READ_AFTER`` later (0 here),
    then it reads the first's answer before it writes: one answer unread, not two."""
    writer_box.put_later("m1", "4", b"A")
    assert _unread(writer_box) == 1
    monkeypatch.setattr(writer_module, "READ_AFTER", 0.0)
    writer_box.put_later("m2", "4", b"B")
    assert _unread(writer_box) == 1
    writer_box.settle()
    assert writer_box.client.zcard(LANE_KEY) == 2


def test_a_refused_write_runs_again_when_recent_and_is_dropped_when_late(
    writer_box: RedisOutbox, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Given the server's scripts flushed under a live writer, when a put's refusal is read
    within ``RERUN_WITHIN``, then the put runs again (its entry is there); when read later
    (``RERUN_WITHIN`` -1 here), then it is dropped with one warning and writes nothing: a put
    run late names a mail long received, which the watchdog would publish again for nothing."""
    writer_box.put_later("warm", "4", b"W")
    writer_box.settle()
    writer_box.client.script_flush()
    writer_box.put_later("recent", "4", b"R")
    writer_box.settle()
    assert writer_box.client.zrange(LANE_KEY, 0, -1) == [b"warm", b"recent"]
    writer_box.client.script_flush()
    monkeypatch.setattr(writer_module, "RERUN_WITHIN", -1.0)
    with caplog.at_level(logging.WARNING, logger="mailguard"):
        writer_box.put_later("late", "4", b"L")
        writer_box.settle()
    assert writer_box.client.zrange(LANE_KEY, 0, -1) == [b"warm", b"recent"]
    assert [r.getMessage() for r in caplog.records if "refused" in r.getMessage()] == [
        caplog.records[-1].getMessage()
    ]
    assert "too late to run" in caplog.records[-1].getMessage()
