"""``send_mail.delay`` with the broker or the result backend down: within
``MAILGUARD_ENQUEUE_TIMEOUT`` it raises :class:`~mailer.errors.NotEnqueued`, which names the
part out of reach and says the mail was not enqueued and that calling again is safe; and no mail
of that call is ever sent once the server is back. Real redis-servers (one stopped), a real
prefork worker, a real SMTP server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from mailer import NotEnqueued
from mailer.records.outbox import RedisOutbox
from mailer.settings import Settings
from tests.waiting import poll
from workers import tasks
from workers.outbox import entries as outbox

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(90)]


def _send(app: Any, mail_id: str) -> Any:
    send_mail = app.tasks[tasks.send_mail.name]
    call = {"subject": mail_id, "body": "x", "mail_id": mail_id}
    return send_mail.delay(f"{mail_id}@example.com", **call)


@pytest.fixture
def settings_in_force() -> Iterator[list[Settings]]:
    """Put settings in force for the test (a list to append to), the earlier ones after it."""
    previous = tasks.settings
    yield []
    tasks.use_settings(previous)
    outbox._down_until["record"] = 0.0


def test_everything_down_raises_not_enqueued_naming_the_result_backend(
    own_redis: RedisServer, smtp_server: SmtpTestServer, settings_in_force: list[Settings]
) -> None:
    """Given the one Redis of broker, ledger and result backend stopped before the first call,
    when ``delay()`` is called, then it returns with ``NotEnqueued`` (not Celery's
    ``RuntimeError``) naming the result backend (subscribed to first) and saying the mail was
    not enqueued and calling again is safe."""
    env = worker_env(own_redis.url, smtp_server.url, MAILGUARD_ENQUEUE_TIMEOUT="1s")
    tasks.use_settings(Settings.from_env(env))
    app = client_app(env)
    own_redis.stop()
    try:
        with pytest.raises(NotEnqueued) as raised:
            _send(app, "down-1")
    finally:
        app.close()
    error = raised.value
    assert error.part in ("result backend", "broker"), error
    message = str(error)
    assert message.startswith("mail not enqueued: the "), message
    assert str(own_redis.port) in message and "calling again" in message and "safe" in message
    assert "must be restarted" not in message


def test_a_broker_down_raises_and_nothing_of_the_call_is_sent_later(
    redis_url: str,
    own_redis: RedisServer,
    smtp_server: SmtpTestServer,
    settings_in_force: list[Settings],
) -> None:
    """Given the broker (its own Redis) stopped and the ledger up, when ``delay()`` is called,
    then it raises ``NotEnqueued`` naming the broker and leaves no outbox entry; when the
    broker is back and a worker runs, then a later mail is sent and the failed call's mail
    never is (the watchdog has nothing to publish: the outbox is empty)."""
    broker = own_redis.url.rsplit("/", 1)[0] + "/1"
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_ENQUEUE_TIMEOUT="1s",
        MAILGUARD_OUTBOX_GRACE="1s",
        MAILGUARD_BROKER_URL=broker,
    )
    tasks.use_settings(Settings.from_env(env))
    app = client_app(env)
    box = outbox.outbox_for(tasks.settings)
    assert isinstance(box, RedisOutbox)
    try:
        _send(app, "warm-0")  # the result backend subscribed, the broker reached once
        own_redis.stop()
        with pytest.raises(NotEnqueued) as raised:
            _send(app, "down-1")
        assert raised.value.part == "broker" and raised.value.url == broker
        assert not box.client.hexists(box.payloads_key, "down-1"), "no entry left behind"
        own_redis.start()
        worker = CeleryWorker(env).start()
        try:
            after = _send(app, "after-1")
            poll(after.ready, 30, "the mail after the outage to be sent")
            poll(lambda: box.size() == 0, 10, "the outbox to be empty")
        finally:
            worker.stop()
    finally:
        app.close()
    subjects = [d.message["Subject"] for d in smtp_server.delivered]
    assert "after-1" in subjects and "down-1" not in subjects, subjects


def test_the_message_masks_a_password() -> None:
    """The URL a ``NotEnqueued`` names has its password masked."""
    error = NotEnqueued("broker", "redis://:s3cret@127.0.0.1:1/1")
    assert "s3cret" not in str(error) and error.url == "redis://:***@127.0.0.1:1/1"
