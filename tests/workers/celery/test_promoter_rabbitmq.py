"""The promoter on RabbitMQ forgets a batch only once the broker acknowledged it.

An AMQP publish returns before the broker holds the message; the promoter (and the watchdog,
which is the same take) forgets what it published, so an unconfirmed message lost at a broker
crash would be a mail lost. A real node: RabbitMQ's memory alarm (``set_vm_memory_high_watermark
0``) blocks every publishing connection, so a publish is written and never acknowledged, as
when the broker dies before writing it; the batch must stay in the schedule.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devservers.celery_worker import client_app, worker_env
from devservers.rabbitmq import RabbitServer
from mailer.records.schedule import MemorySchedule
from mailer.settings import Settings
from workers.brokers.confirmed import ConfirmedPublisher, Unconfirmed
from workers.polling.promoter import Promoter
from workers.waiting.payload import Parked

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def app(rabbit: RabbitServer, redis_url: str) -> Iterator[Any]:
    """A client app on ``rabbit`` with a queue of its own, declared (the promoter declares
    nothing: its worker's consumer has)."""
    env = worker_env(
        redis_url, "memory://", MAILGUARD_BROKER_URL=rabbit.url, MAILGUARD_QUEUE=_queue()
    )
    app = client_app(env)
    app.conf.mailguard_env = env
    with app.connection_for_write() as connection:
        app.amqp.queues[env["MAILGUARD_QUEUE"]](connection.default_channel).declare()
    yield app
    app.close()


def _queue() -> str:
    return f"mail-{uuid.uuid4().hex[:8]}"


def _queued(app: Any) -> int:
    queue = app.conf.mailguard_env["MAILGUARD_QUEUE"]
    with app.connection_for_write() as connection:
        declared = app.amqp.queues[queue](connection.default_channel).queue_declare(passive=True)
    return int(declared.message_count)


def _promoter(app: Any, schedule: MemorySchedule, timeout: float) -> Promoter:
    promoter = Promoter(app, schedule, Settings.from_env(app.conf.mailguard_env))
    assert promoter._confirmed is not None, "an AMQP broker: the promoter confirms"
    promoter._confirmed = ConfirmedPublisher(app, timeout=timeout)
    return promoter


def _park(schedule: MemorySchedule, n: int) -> None:
    for i in range(n):
        mail_id = f"m{i}"
        payload = Parked(mail_id, [f"r{i}@example.com"], {"mail_id": mail_id}, 0.0).encode()
        schedule.park(mail_id, time.time() - 1, payload)


def test_a_confirmed_batch_is_queued_and_forgotten(app: Any) -> None:
    """Given 50 due parked mails, when the promoter runs once, then all 50 are in the queue
    (the broker acknowledged them) and the schedule holds none; a second batch on the same
    connection is confirmed too."""
    schedule = MemorySchedule()
    _park(schedule, 50)
    promoter = _promoter(app, schedule, timeout=10.0)
    try:
        assert promoter.promote_once() == 50
        assert _queued(app) == 50
        assert schedule.stats().promoting == 0 and schedule.stats().parked == 0
        _park(schedule, 3)
        assert promoter.promote_once() == 3
        assert _queued(app) == 53
    finally:
        promoter.stop()


def test_an_unacknowledged_batch_stays_in_the_schedule(app: Any, rabbit: RabbitServer) -> None:
    """Given a broker that takes publishes but acknowledges none (its memory alarm on), when the
    promoter runs, then it raises once its wait for the confirms is over and the mails go back
    to the schedule (due again shortly), none forgotten; when the alarm ends, the next run
    publishes them and forgets them."""
    schedule = MemorySchedule()
    _park(schedule, 5)
    promoter = _promoter(app, schedule, timeout=1.5)
    rabbit.ctl("set_vm_memory_high_watermark", "0")
    try:
        with pytest.raises(Unconfirmed, match="not acknowledged"):
            promoter.promote_once()
        stats = schedule.stats()
        assert stats.parked + stats.promoting == 5, "nothing forgotten"
    finally:
        rabbit.ctl("set_vm_memory_high_watermark", "0.4")
    try:
        deadline = time.monotonic() + 30
        published = 0
        while published < 5 and time.monotonic() < deadline:
            published += promoter.promote_once()
            time.sleep(0.2)
        assert published == 5
        assert schedule.stats().parked == 0 and schedule.stats().promoting == 0
    finally:
        promoter.stop()
    assert _queued(app) >= 5, "the blocked copies may arrive too: the ledger ends them"
