"""The outbox with a real Redis broker and ledger, no worker: ``send_mail.apply_async`` writes
each first message's entry before publishing it, a receipt clears it, and the watchdog's outbox
part (:class:`workers.polling.outbox_watch.OutboxWatch`) publishes again only what was popped and
never received; a backlog in the queue is never doubled. The test pops messages from the broker's
lists itself: a message popped and dropped is exactly what kombu loses when its consumer dies
between ``BRPOP`` and the unacked record."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import redis

from devservers.celery_worker import client_app, worker_env
from devservers.ports import free_port
from devservers.redis_servers import RedisServer
from mailer.errors import BackendUnavailable
from mailer.mail.seal import seal
from mailer.metrics import default_metrics
from mailer.outcomes import Outcome
from mailer.records.outbox import RedisOutbox, lane_of
from mailer.records.schedule import RedisSchedule
from mailer.settings import Settings
from mailer.steps import Progress
from workers import tasks
from workers.outbox import entries as outbox
from workers.polling.outbox_watch import OutboxWatch
from workers.polling.promoter import Promoter
from workers.run import state
from workers.waiting.payload import Parked

pytestmark = [pytest.mark.redis]

#: What a worker is told about a message it received (Celery's ``delivery_info``).
FIRST = {"redelivered": False}


@pytest.fixture
def env(redis_url: str) -> Iterator[dict[str, str]]:
    """Settings of a deployment on the suite's Redis (broker db 1, ledger db 0; flushed by
    ``redis_url``), in force in this process as in a web process that enqueues."""
    env = worker_env(redis_url, "smtp://127.0.0.1:1", MAILGUARD_OUTBOX_GRACE="1s")
    previous = tasks.use_settings(Settings.from_env(env))
    yield env
    tasks.use_settings(previous)


@pytest.fixture
def app(env: dict[str, str]) -> Iterator[Any]:
    app = client_app(env)
    yield app
    app.close()


@pytest.fixture
def box(env: dict[str, str]) -> RedisOutbox:
    found = outbox.outbox_for(Settings.from_env(env))
    assert isinstance(found, RedisOutbox)
    return found


@pytest.fixture
def broker(env: dict[str, str]) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
    yield client
    client.close()


def _send(app: Any, mail_id: str, **options: Any) -> Any:
    """``send_mail.apply_async`` of one mail; then the outbox's write is waited for (the caller
    does not wait: the test reads the outbox at once)."""
    send_mail = app.tasks[tasks.send_mail.name]
    call = {"subject": mail_id, "body": "x", "mail_id": mail_id}
    result = send_mail.apply_async(args=[f"{mail_id}@example.com"], kwargs=call, **options)
    written = outbox.outbox_for(tasks.settings)
    if written is not None:
        with contextlib.suppress(BackendUnavailable):  # an outbox down: published without it
            written.settle()
    return result


def _queued(broker: redis.Redis) -> list[str]:
    """The mail ids queued in the broker, next to be popped first, every priority list."""
    ids: list[str] = []
    for key in sorted(broker.scan_iter("mail*", _type="list")):
        if broker.type(key) == b"list":
            for raw in reversed(broker.lrange(key, 0, -1)):  # kombu pushes left, pops right
                ids.append(_mail_id(raw))
    return ids


def _mail_id(raw: bytes) -> str:
    message = json.loads(raw)
    _, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    return str(kwargs.get("mail_id") or message["headers"]["id"])


def _pop(broker: redis.Redis) -> tuple[str, int | None]:
    """Pop the next message as a consumer does (the lowest priority list first: kombu's order
    for mailguard's steps); its mail id and priority."""
    for key in sorted(broker.scan_iter("mail*", _type="list")):
        raw = broker.rpop(key)
        if raw is not None:
            message = json.loads(raw)
            return _mail_id(raw), message["properties"].get("priority")
    raise AssertionError("nothing queued")


def _watch(app: Any, env: dict[str, str], box: RedisOutbox, grace: float = 0.0) -> OutboxWatch:
    """The watchdog's outbox part on this app, with no waits: every call looks, an entry shown
    popped once is published, the order slack is a millisecond (the test spaces its writes by
    two: entries written in one millisecond cannot be ordered)."""
    settings = Settings.from_env(env)
    schedule = RedisSchedule(box.client, env["MAILGUARD_LIMITER_URL"])
    promoter = Promoter(app, schedule, settings)
    return OutboxWatch(promoter, box, grace, settings.queue, poll=0, settle=0, slack=0.001)


def test_enqueue_writes_the_entry_a_receipt_clears_it(
    app: Any, box: RedisOutbox, broker: redis.Redis
) -> None:
    """Given ``apply_async`` of a first message, then its entry holds the message as the caller
    made it (task id, arguments, lane of its priority), the message is queued, and a receipt
    removes the entry."""
    result = _send(app, "first-1")
    assert _queued(broker) == ["first-1"]
    popped = box.overdue(0.0, drained=True, slack=0).popped
    assert [(p.mail_id, p.lane) for p in popped] == [("first-1", popped[0].lane)]
    payload = box.client.hget(box.payloads_key, "first-1")
    entry = Parked.decode(payload, "first-1")
    assert entry.task_id == result.id
    assert entry.args == ["first-1@example.com"]
    assert entry.kwargs["subject"] == "first-1" and "_requested_at" in entry.kwargs
    _, priority = _pop(broker)
    assert lane_of(priority) == popped[0].lane
    outbox.received(tasks.settings, result.id, entry.kwargs, {"priority": priority})
    box.settle()  # the worker does not wait for its clear; the test does
    assert box.size() == 0


def test_a_deferred_run_and_a_redelivery_touch_no_entry(app: Any, box: RedisOutbox) -> None:
    """Given a deferred run's message (it carries ``_progress``: the schedule's watch covers it),
    then no entry is written; and a redelivered copy's receipt clears nothing."""
    secret = tasks.settings.secret
    progress = seal(Progress(deferrals=1), "again-1", secret)
    send_mail = app.tasks[tasks.send_mail.name]
    kwargs = {"subject": "s", "body": "b", "mail_id": "again-1", "_progress": progress}
    send_mail.apply_async(args=["again-1@example.com"], kwargs=kwargs)
    assert box.size() == 0
    _send(app, "first-2")
    outbox.received(tasks.settings, "t", {"mail_id": "first-2"}, {"redelivered": True})
    outbox.received(tasks.settings, "t", {"mail_id": "first-2", "_progress": "x"}, FIRST)
    box.settle()
    assert box.size() == 1


def test_a_backlog_is_not_published_again(
    app: Any, env: dict[str, str], box: RedisOutbox, broker: redis.Redis
) -> None:
    """Given 20 mails queued, older than the grace, nothing received: the watch publishes
    nothing (the queue holds them). When 6 are popped in order and the 2nd to 6th received
    (the 1st lost), then only the 1st is published again, once; the 14 still queued stay single
    (an independent count of the broker's lists), and a second look publishes nothing more."""
    watch = _watch(app, env, box)
    for n in range(20):
        _send(app, f"bulk-{n:02}")
        time.sleep(0.002)  # one entry a millisecond at most: Redis's clock orders them
    assert watch.check() == 0 and watch.check() == 0
    assert len(_queued(broker)) == 20 and box.size() == 20
    lost, _ = _pop(broker)
    assert lost == "bulk-00"
    for _ in range(5):
        mail_id, priority = _pop(broker)
        outbox.received(tasks.settings, mail_id, {"mail_id": mail_id}, {"priority": priority})
    box.settle()
    assert watch.check() == 1
    queued = _queued(broker)
    assert sorted(queued) == sorted(["bulk-00", *(f"bulk-{n:02}" for n in range(6, 20))])
    assert queued[-1] == "bulk-00", "the copy is queued behind the backlog"
    assert watch.check() == 0
    assert len(_queued(broker)) == 15 and box.size() == 15


def test_a_lost_message_in_an_empty_queue_is_published_again(
    app: Any, env: dict[str, str], box: RedisOutbox, broker: redis.Redis, caplog: Any
) -> None:
    """Given one mail popped and dropped (nothing behind it to move a mark), when the watch
    finds the queue empty, then it publishes the mail again under its task id, with one log
    line (mail id, no address) and one count; the copy's receipt clears the entry."""
    result = _send(app, "alone-1")
    _pop(broker)
    watch = _watch(app, env, box)
    registry = default_metrics().registry
    before = registry.get_sample_value("mailguard_outbox_republished_total") or 0.0
    with caplog.at_level(logging.WARNING, logger="mailguard"):
        assert watch.check() == 1
    assert registry.get_sample_value("mailguard_outbox_republished_total") == before + 1
    lines = [r.getMessage() for r in caplog.records if "published again" in r.getMessage()]
    assert len(lines) == 1 and "alone-1" in lines[0] and "@" not in lines[0]
    assert _queued(broker) == ["alone-1"]
    mail_id, priority = _pop(broker)
    outbox.received(tasks.settings, result.id, {"mail_id": mail_id}, {"priority": priority})
    box.settle()
    assert box.size() == 0
    assert watch.check() == 0


def test_the_grace_holds_back_a_young_entry(
    app: Any, env: dict[str, str], box: RedisOutbox, broker: redis.Redis
) -> None:
    """Given a mail popped and dropped a moment ago, then with a grace of a minute the watch
    publishes nothing."""
    _send(app, "young-1")
    _pop(broker)
    assert _watch(app, env, box, grace=60.0).check() == 0
    assert _queued(broker) == []


def test_an_outbox_down_at_enqueue_publishes_anyway(
    redis_url: str, caplog: Any, broker: redis.Redis, env: dict[str, str]
) -> None:
    """Given the ledger's Redis unreachable, when mails are enqueued, then each is published
    all the same, one warning is logged, and the outbox is not asked again for a while."""
    down = f"redis://127.0.0.1:{free_port()}/0"
    settings = Settings.from_env(env | {"MAILGUARD_LEDGER_URL": down})
    previous = tasks.use_settings(settings)
    app = client_app(env | {"MAILGUARD_LEDGER_URL": down})
    outbox._down_until["record"] = 0.0
    try:
        with caplog.at_level(logging.WARNING, logger="mailguard"):
            _send(app, "down-1")
            started = time.monotonic()
            _send(app, "down-2")
            assert time.monotonic() - started < outbox.DOWN_PAUSE
    finally:
        tasks.use_settings(previous)
        app.close()
        outbox._down_until["record"] = 0.0
    assert sorted(_queued(broker)) == ["down-1", "down-2"]
    lines = [r.getMessage() for r in caplog.records if "outbox" in r.getMessage()]
    assert len(lines) == 1 and "publishing without it" in lines[0], lines


def test_a_failed_publish_leaves_no_entry(app: Any, env: dict[str, str], box: RedisOutbox) -> None:
    """Given a broker that cannot be reached, when ``apply_async`` raises, then the entry it
    wrote first is gone: the caller saw the failure, the watchdog never sends it."""
    dead = client_app(env | {"MAILGUARD_BROKER_URL": f"redis://127.0.0.1:{free_port()}/1"})
    try:
        with pytest.raises(Exception):  # noqa: B017 # kombu's OperationalError, whatever it wraps
            _send(dead, "nowhere-1", retry=False)
    finally:
        dead.close()
    assert box.size() == 0


def test_a_failed_publishs_entry_on_a_redis_that_stays_down_is_tried_once_a_pause(
    app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a failed publish whose outbox is down (its entry kept to remove later), when mails
    are enqueued while it stays down, then the removal is tried at the first of them and not
    again within :data:`workers.outbox.entries.DOWN_PAUSE`: no caller waits on it more than once a
    pause. The mails are published meanwhile; a process whose Redis is replaced forgets it."""
    dead = RedisOutbox(redis.Redis(port=free_port(), socket_connect_timeout=0.5), "redis://dead")
    tries: list[str] = []
    real = dead.discard
    monkeypatch.setattr(dead, "discard", lambda *a: tries.append(a[0]) or real(*a))
    monkeypatch.setitem(outbox._down_until, "discard", 0.0)
    outbox.discard(outbox.Recorded(dead, "gone-1", "4", b""))
    assert tries == ["gone-1"] and len(outbox._discards) == 1
    for n in range(3):
        _send(app, f"after-{n}")
    assert tries == ["gone-1", "gone-1"], "tried again within the pause"
    assert len(outbox._discards) == 1
    outbox.close_writers()
    assert not outbox._discards


def test_the_grace_setting() -> None:
    """``MAILGUARD_OUTBOX_GRACE``: 10 s by default, ``off`` keeps no outbox, and a value out of
    1 s-10 m is refused in one line naming the variable."""
    assert Settings.from_env({}).outbox_grace == 10.0
    off = Settings.from_env({"MAILGUARD_OUTBOX_GRACE": "off"})
    assert off.outbox_grace is None and outbox.outbox_for(off) is None
    for bad in ("500ms", "11m"):
        with pytest.raises(ValueError, match=r"^MAILGUARD_OUTBOX_GRACE must be 1s-10m or off"):
            Settings.from_env({"MAILGUARD_OUTBOX_GRACE": bad})


def test_a_caller_s_countdown_is_kept_by_the_copy(
    app: Any, env: dict[str, str], box: RedisOutbox, broker: redis.Redis
) -> None:
    """Given a mail enqueued with ``countdown=20`` (held by a worker, not parked) and its message
    lost, then the watch's copy carries the same ``eta``: the mail is still not sent early."""
    result = _send(app, "later-1", countdown=20)
    original = json.loads(_pop_raw(broker))["headers"]["eta"]
    assert _watch(app, env, box).check() == 1
    copy = json.loads(_pop_raw(broker))
    assert copy["headers"]["id"] == result.id
    gap = datetime.fromisoformat(copy["headers"]["eta"]) - datetime.fromisoformat(original)
    assert abs(gap.total_seconds()) < 0.01


def _pop_raw(broker: redis.Redis) -> bytes:
    """The next message as the broker holds it, from whichever priority list."""
    for key in sorted(broker.scan_iter("mail*", _type="list")):
        if broker.type(key) == b"list" and (raw := broker.rpop(key)) is not None:
            return bytes(raw)
    raise AssertionError("nothing queued")


def test_an_unusable_entry_is_dropped_not_published(
    app: Any, env: dict[str, str], box: RedisOutbox, broker: redis.Redis, caplog: Any
) -> None:
    """Given an entry whose payload cannot be decoded (written by hand) in an empty queue, then
    the watch publishes nothing, logs one error and removes it; nothing is counted."""
    box.put("junk-1", "4", b"\\xffnot a payload")
    time.sleep(0.002)  # older than the grace of 0 on Redis's clock
    registry = default_metrics().registry
    before = registry.get_sample_value("mailguard_outbox_republished_total") or 0.0
    with caplog.at_level(logging.ERROR, logger="mailguard"):
        assert _watch(app, env, box).check() == 0
    assert [r.getMessage() for r in caplog.records if "unusable" in r.getMessage()]
    assert box.size() == 0 and _queued(broker) == []
    assert (registry.get_sample_value("mailguard_outbox_republished_total") or 0.0) == before


def test_a_finished_mail_s_entry_is_dropped_without_an_alarm(
    app: Any, env: dict[str, str], box: RedisOutbox, broker: redis.Redis, caplog: Any
) -> None:
    """Given a mail popped whose entry stayed though it was received and sent (its receipt's
    clear lost), when the watch finds it in an empty queue, then nothing is published, no
    "published again" line is logged, the count does not move, and the entry is gone; a lost
    mail beside it (no outcome) is still published again."""
    _send(app, "sent-1")
    _send(app, "lost-1")
    _pop(broker), _pop(broker)
    state.guard().ledger.record(Outcome(status="sent", mail_id="sent-1", kind="default"))
    registry = default_metrics().registry
    before = registry.get_sample_value("mailguard_outbox_republished_total") or 0.0
    with caplog.at_level(logging.WARNING, logger="mailguard"):
        assert _watch(app, env, box).check() == 1
    assert registry.get_sample_value("mailguard_outbox_republished_total") == before + 1
    lines = [r.getMessage() for r in caplog.records if "published again" in r.getMessage()]
    assert len(lines) == 1 and "lost-1" in lines[0], lines
    assert _queued(broker) == ["lost-1"]
    assert box.client.hexists(box.payloads_key, "sent-1") is False


def test_receipts_redis_could_not_take_are_made_later(own_redis: RedisServer) -> None:
    """Given a worker's receipts while the ledger's Redis is down and for the pause after it
    (the Redis restarted, its entries written again by the producers), when the watchdog's
    retry runs with Redis back, then every entry is cleared: none is left to be taken for
    lost; while Redis is still down the retry raises and keeps them."""
    env = worker_env(own_redis.url, "smtp://127.0.0.1:1", MAILGUARD_OUTBOX_GRACE="1s")
    settings = Settings.from_env(env)
    box = outbox.outbox_for(settings)
    assert isinstance(box, RedisOutbox)
    outbox._receipts.clear()
    outbox._down_until["received"] = 0.0
    try:
        box.put("early-1", "4", b"E")
        own_redis.stop()
        outbox.received(settings, "early-1", {"mail_id": "early-1"}, {"priority": 4})
        with pytest.raises(BackendUnavailable):
            outbox.retry_receipts()
        own_redis.start()
        for mail_id in ("early-1", "paused-1"):  # written again after the restart
            box.put(mail_id, "4", b"P")
        outbox.received(settings, "paused-1", {"mail_id": "paused-1"}, {"priority": 4})
        assert box.size() == 2, "within the pause, nothing is asked of Redis"
        assert outbox.retry_receipts() == 2
        assert box.size() == 0
    finally:
        outbox._receipts.clear()
        outbox._down_until["received"] = 0.0
        box.close()
