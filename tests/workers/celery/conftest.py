"""Module-scoped servers of the Celery tests: the stack of the input tests (``test_celery_input``,
``test_hostile_input``), whose hypothesis runs share one worker rather than start one per
example, and the RabbitMQ node of the RabbitMQ tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery import Celery

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.rabbitmq import RabbitServer
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer

#: The ``loose_stack`` fixture's parts: the client app, the worker and the SMTP server.
LooseStack = tuple[Celery, CeleryWorker, SmtpTestServer]


@pytest.fixture(scope="module")
def loose_stack() -> Iterator[LooseStack]:
    """One redis-server, aiosmtpd and prefork worker (2 processes) for the module, under a loose
    policy (``1000/1s``: these tests are about input, not limits)."""
    redis_server = RedisServer().start()
    smtp = SmtpTestServer().start()
    env = worker_env(redis_server.url, smtp.url, MAILGUARD_POLICY="1000/1s")
    worker = CeleryWorker(env)
    app = client_app(env)
    try:
        worker.start()
        yield app, worker, smtp
    finally:
        worker.stop()
        app.close()
        smtp.stop()
        redis_server.cleanup()


@pytest.fixture(scope="module")
def rabbit() -> Iterator[RabbitServer]:
    """One RabbitMQ node for the module (it takes a few seconds to start); each test uses a
    queue of its own."""
    server = RabbitServer().start()
    yield server
    server.cleanup()
