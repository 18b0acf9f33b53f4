"""Kind priorities on real brokers: a code mail overtakes a queued bulk burst.

3 000 mails of the default kind (priority 5) are queued to distinct recipients, then one
``code`` mail (priority 9): the worker (prefork, 2 processes) takes the code mail next, on the
Redis broker and on RabbitMQ. Enqueued through the client app's own ``send_mail``
(``GuardedTask.apply_async``), which publishes each mail at its kind's priority.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.rabbitmq import RabbitServer
from mailer.kinds import Kinds
from tests.smtp_server import SmtpTestServer
from tests.waiting import poll
from workers import tasks
from workers.priority import kind_priority, message_priority

TASK = "mailguard.send_mail"
BULK = 3000

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(params=["redis", "rabbitmq"])
def broker_url(request: pytest.FixtureRequest, redis_url: str) -> Iterator[str]:
    if request.param == "redis":
        yield redis_url.rsplit("/", 1)[0] + "/1"
        return
    server = RabbitServer().start()
    yield server.url
    server.cleanup()


def test_the_brokers_priority_is_the_kinds() -> None:
    """Redis pops lower numbers first, RabbitMQ higher: the kind's order is kept on both."""
    kinds = Kinds.defaults()
    code, default = kind_priority(kinds, "code"), kind_priority(kinds, "default")
    assert (code, default, kind_priority(kinds, "no-such-kind")) == (9, 5, 5)
    assert message_priority("redis://h/1", code) < message_priority("redis://h/1", default)
    assert message_priority("amqp://h//", code) > message_priority("amqp://h//", default)


def test_a_code_mail_overtakes_a_bulk_burst(
    broker_url: str, redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """The code mail is received within 2 s of its enqueue while thousands of bulk mails wait."""
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_BROKER_URL=broker_url,
        MAILGUARD_QUEUE=f"mail-{uuid.uuid4().hex[:8]}",
        MAILGUARD_POLICY="1/1s",
    )
    app = client_app(env)
    send_mail = app.tasks[tasks.send_mail.name]  # the shared task, bound to the client app
    worker = CeleryWorker(env).start()
    try:
        for n in range(BULK):
            send_mail.apply_async(
                args=[f"bulk{n}@example.com"], kwargs={"subject": f"bulk {n}", "body": "news"}
            )
        backlog_at_code = BULK - len(smtp_server.delivered)
        enqueued = time.time()
        send_mail.apply_async(
            args=["ada@example.com"], kwargs={"kind": "code", "context": {"code": "493112"}}
        )
        poll(
            lambda: any(d.message["Subject"] == "Your code" for d in smtp_server.delivered),
            20,
            "the code mail",
        )
        code = next(d for d in smtp_server.delivered if d.message["Subject"] == "Your code")
        bulk_before = sum(1 for d in smtp_server.delivered if d.received_at <= code.received_at) - 1
    finally:
        worker.kill()
        app.close()
    waited = code.received_at - enqueued
    print(
        f"{broker_url.split(':', maxsplit=1)[0]}: code mail after {waited:.2f} s, "
        f"{backlog_at_code} bulk mails queued at its enqueue, {bulk_before} delivered before it"
    )
    assert backlog_at_code > 1000, "the burst was still queued when the code mail came"
    assert waited < 2.0, f"the code mail waited {waited:.2f} s behind the burst"
