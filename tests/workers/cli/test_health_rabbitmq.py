"""``mailguard health`` on a RabbitMQ broker: a real node, a real worker, Redis for the ledger.
The queue is a priority queue (``x-max-priority``): its message count covers every kind."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from devservers.celery_worker import CeleryWorker, worker_env
from devservers.rabbitmq import RabbitServer
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll
from tests.workers.cli.test_cli import run
from tests.workers.cli.test_health import _default_kind_mail, _gone, _queued
from workers.process.liveness import GONE


@pytest.fixture(scope="module")
def rabbit() -> Iterator[RabbitServer]:
    """One RabbitMQ node for the module (it takes a few seconds to start)."""
    server = RabbitServer().start()
    yield server
    server.cleanup()


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_health_on_rabbitmq_fails_with_default_kind_mail_and_no_worker_consuming(
    rabbit: RabbitServer, redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """No worker yet, a default-kind mail waiting: exit 1. A worker sends it: exit 0. The
    worker killed and another mail waiting: once its record is gone, exit 1 naming the cause."""
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_BROKER_URL=rabbit.url,
        MAILGUARD_QUEUE=f"mail-{uuid.uuid4().hex[:8]}",
        MAILGUARD_POLICY="100/1s",
    )
    _default_kind_mail(env, "ada@example.com")
    alone = run(["health", "--json"], env)
    report = json.loads(alone.stdout)
    assert (report["queued"], report["held"], report["workers"]) == (1, None, []), alone.stdout
    assert alone.returncode == 1 and report["problem"].startswith("no running worker consumes")
    worker = CeleryWorker(env).start()
    try:
        poll(lambda: len(smtp_server.delivered) == 1, 30, "the first mail")
        poll(lambda: run(["health"], env).returncode == 0, 20, "a healthy verdict")
        worker.kill()
        _default_kind_mail(env, "bob@example.com")
        poll(lambda: _gone(env), 3 * GONE, "the killed worker's record to be gone")
        done = run(["health"], env)
        assert _queued(done.stdout) == 1 and done.returncode == 1, done.stdout
        assert "no running worker consumes the queue while mail is due" in done.stderr
    finally:
        worker.stop()
