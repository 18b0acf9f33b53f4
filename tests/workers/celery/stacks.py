"""A whole stack for input tests: one redis-server, aiosmtpd and a prefork worker (2)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from celery import Celery

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer

Stack = tuple[Celery, CeleryWorker, SmtpTestServer]


@contextmanager
def loose_stack() -> Iterator[Stack]:
    """The stack under a loose policy (``1000/1s``: these tests are about input, not limits)."""
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
