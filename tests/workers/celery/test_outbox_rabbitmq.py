"""The outbox on a RabbitMQ broker: a real node, a real prefork worker, Redis for the ledger, a
real SMTP server. RabbitMQ acknowledges per message and has no pop window; a message can still
vanish between ``send_mail.delay`` and a worker (a consumer that acknowledged it and died, a
queue purged by hand). Here the test takes the message and acknowledges it itself: the
watchdog finds the queue empty (a passive declare) and publishes the mail again, sent once."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.rabbitmq import RabbitServer
from devservers.smtp_server import SmtpTestServer
from mailer.mail.message import message_id
from mailer.settings import Settings
from tests.waiting import poll
from workers import tasks

SENDER = "mailguard@example.org"

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(180)]


def test_a_vanished_first_message_is_sent_once_on_rabbitmq(
    rabbit: RabbitServer, redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """Given a mail enqueued on RabbitMQ and its message taken and acknowledged before any
    worker runs, when a worker starts, then its watchdog publishes the mail again (one log
    line) and it is sent exactly once; a second mail that was not taken is not published
    again."""
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_BROKER_URL=rabbit.url,
        MAILGUARD_QUEUE=f"mail-{uuid.uuid4().hex[:8]}",
        MAILGUARD_POLICY="100/1s",
        MAILGUARD_OUTBOX_GRACE="1s",
    )
    previous = tasks.use_settings(Settings.from_env(env))
    app = client_app(env)
    worker = None
    try:
        send_mail = app.tasks[tasks.send_mail.name]
        results = [
            send_mail.apply_async(
                args=[f"{name}@example.com"], kwargs={"subject": name, "body": "x", "mail_id": name}
            )
            for name in ("gone-1", "kept-1")
        ]
        _take_first(app, env["MAILGUARD_QUEUE"])
        worker = CeleryWorker(env).start()
        ready = time.time()
        poll(lambda: all(r.ready() for r in results), 40, "both mails to be sent")
        log = worker.log()
    finally:
        if worker is not None:
            worker.stop()
        app.close()
        tasks.use_settings(previous)
    assert log.count("mailguard watchdog: mail gone-1 published again") == 1, log[-3000:]
    assert "kept-1 published again" not in log
    delivered: dict[str, list[float]] = {}
    for d in smtp_server.delivered:
        delivered.setdefault(str(d.message["Message-ID"]), []).append(d.received_at)
    for name in ("gone-1", "kept-1"):
        assert len(delivered[message_id(name, SENDER)]) == 1
    arrived = delivered[message_id("gone-1", SENDER)][0]
    print(f"vanished first message sent {arrived - ready:.2f} s after the worker was ready")


def _take_first(app: Any, queue: str) -> None:
    """Take the queue's first message and acknowledge it: gone from the broker."""
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        message = channel.basic_get(queue=queue)
        assert message is not None, "nothing queued"
        channel.basic_ack(message.delivery_tag)
