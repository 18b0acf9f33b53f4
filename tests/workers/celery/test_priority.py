"""Kind priorities on real brokers: a code mail overtakes a queued bulk burst.

3 000 mails of the default kind (priority 5) are queued to distinct recipients, then one
``code`` mail (priority 9): the worker (prefork, 2 processes) takes the code mail next, on the
Redis broker and on RabbitMQ. Enqueued through the client app's own ``send_mail``
(``GuardedTask.apply_async``), which publishes each mail at its kind's priority.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.rabbitmq import RabbitServer
from devservers.smtp_server import SmtpTestServer
from mailer.mail.kinds import Kinds
from tests.waiting import poll
from workers import tasks
from workers.brokers.priority import kind_priority, message_priority, publish_priority

TASK = "mailguard.send_mail"
BULK = 3000
ROOT = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(params=["redis", "rabbitmq"])
def broker_url(request: pytest.FixtureRequest, redis_url: str) -> str:
    """The test's broker: the Redis of ``redis_url`` (db 1), or the module's RabbitMQ node
    (``rabbit``: started once, each test on a queue of its own, :func:`_env`)."""
    if request.param == "redis":
        return redis_url.rsplit("/", 1)[0] + "/1"
    rabbit: RabbitServer = request.getfixturevalue("rabbit")
    return rabbit.url


def _env(broker_url: str, redis_url: str, smtp_server: SmtpTestServer) -> dict[str, str]:
    """A worker's environment on ``broker_url`` with a queue of its own, under ``1/1s``."""
    return worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_BROKER_URL=broker_url,
        MAILGUARD_QUEUE=f"mail-{uuid.uuid4().hex[:8]}",
        MAILGUARD_POLICY="1/1s",
    )


def _queue_bulk(send_mail: Any) -> None:
    """Queue the burst: ``BULK`` mails of the default kind to distinct recipients."""
    for n in range(BULK):
        send_mail.apply_async(
            args=[f"bulk{n}@example.com"], kwargs={"subject": f"bulk {n}", "body": "news"}
        )


def test_the_brokers_priority_is_the_kinds() -> None:
    """Redis pops lower numbers first, RabbitMQ higher: the kind's order is kept on both."""
    kinds = Kinds.defaults()
    code, default = kind_priority(kinds, "code"), kind_priority(kinds, "default")
    assert (code, default, kind_priority(kinds, "no-such-kind")) == (9, 5, 5)
    assert message_priority("redis://h/1", code) < message_priority("redis://h/1", default)
    # A deferred mail's next run: one step above its kind, at most 9 (a code mail stays at 9).
    published = {
        (url, kind, booked): publish_priority(url, kinds, kind, booked=booked)
        for url in ("redis://h/1", "amqp://h//")
        for kind in ("default", "code")
        for booked in (False, True)
    }
    assert published[("amqp://h//", "default", True)] == 6
    assert published[("redis://h/1", "default", True)] == 3
    assert published[("amqp://h//", "code", True)] == published[("amqp://h//", "code", False)]
    assert message_priority("amqp://h//", code) > message_priority("amqp://h//", default)


def test_a_code_mail_overtakes_a_bulk_burst(
    broker_url: str, redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """The code mail is received within 2 s of its enqueue while thousands of bulk mails wait."""
    env = _env(broker_url, redis_url, smtp_server)
    app = client_app(env)
    send_mail = app.tasks[tasks.send_mail.name]  # the shared task, bound to the client app
    worker = CeleryWorker(env).start()
    try:
        _queue_bulk(send_mail)
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


def test_a_booked_mail_comes_back_before_a_queued_burst_of_its_kind(
    broker_url: str, redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """A booked mail holds a slot: its next run is published one step above its kind, so the
    burst of its own kind's first runs queued before it cannot make it late (and booked again).

    Two mails to one reader (one booked 1 s after the other) and then a burst of the same kind
    are queued before the worker starts: the booked mail's retry is published after the burst."""
    env = _env(broker_url, redis_url, smtp_server)
    app = client_app(env)
    send_mail = app.tasks[tasks.send_mail.name]
    booked = [
        send_mail.apply_async(args=["ada@example.com"], kwargs={"subject": f"ada {n}", "body": "b"})
        for n in (1, 2)
    ]
    _queue_bulk(send_mail)
    worker = CeleryWorker(env).start()
    try:
        outcomes = [r.get(timeout=60) for r in booked]
        delivered = list(smtp_server.delivered)
    finally:
        worker.kill()
        app.close()
    ada = sorted(d.received_at for d in delivered if d.rcpt_tos == ("ada@example.com",))
    bulk_before = sum(
        1 for d in delivered if d.received_at < ada[-1] and d.rcpt_tos != ("ada@example.com",)
    )
    print(f"{broker_url.split(':', maxsplit=1)[0]}: booked mail after {bulk_before} bulk mails")
    # Either may be decided first (two pool processes): one is sent at once, the other booked.
    assert [o["status"] for o in outcomes] == ["sent", "sent"], outcomes
    assert sorted(o["deferrals"] for o in outcomes) == [0, 1], "booked once, never again"
    assert len(ada) == 2 and ada[1] - ada[0] >= 0.5, ada  # never early (SMTP latency aside)
    assert bulk_before < BULK // 3, f"the booked mail waited behind {bulk_before} first runs"


def test_the_memory_broker_takes_a_code_mail_before_a_queued_burst() -> None:
    """In one process (embedded defaults, the demo's broker): the code mail runs first."""
    script = (
        "import json\n"
        "from workers.app import app\n"
        "from workers.tasks import send_mail\n"
        "from workers.brokers.inprocess import inprocess_worker\n"
        "app.conf.broker_transport_options |= {'polling_interval': 0.01}\n"
        "from workers.run.call import worker_started\n"
        "worker_started(app)  # the worker started below takes what is queued before it\n"
        "bulk = [send_mail.delay(f'bulk{n}@example.com', subject='s', body='b')\n"
        "        for n in range(30)]\n"
        "code = send_mail.delay('ada@example.com', kind='code', context={'code': '493112'})\n"
        "with inprocess_worker(app, concurrency=1):\n"
        "    sent = [r.get(timeout=30)['sent_at'] for r in [code, *bulk]]\n"
        "print(json.dumps(sent))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
    env |= {"PYTHONPATH": str(ROOT), "MAILGUARD_SMTP_URL": "memory://"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    code, *bulk = json.loads(done.stdout.strip().splitlines()[-1])
    assert code < min(bulk), "the code mail waited behind bulk mails queued before it"
