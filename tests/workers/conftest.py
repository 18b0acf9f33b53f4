"""The worker stack shared by ``tests/workers/``: a real Celery worker on the test's Redis and
SMTP server, and a client app with the same configuration.

``stack`` is a factory: each test module builds the shape it needs from it (its
``MAILGUARD_*`` overrides, the worker's pool and concurrency, this process's settings, the
client app made current) under a name that says what that shape is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import celery
import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from mailer.settings import Settings
from workers.process import settings as process_settings


@dataclass(frozen=True)
class Stack:
    """A running worker, the client app that enqueues to it, its environment and its SMTP
    server (the test's ``smtp_server``)."""

    env: dict[str, str]
    app: celery.Celery
    worker: CeleryWorker
    smtp: SmtpTestServer


StackFactory = Callable[..., Stack]


@pytest.fixture
def stack(redis_url: str, smtp_server: SmtpTestServer) -> Iterator[StackFactory]:
    """Start a worker on the test's Redis and SMTP server; everything stops after the test.

    ``stack(MAILGUARD_POLICY="100/1s", concurrency=1, pool="threads", settings=True,
    current=True)``: the keyword ``MAILGUARD_*`` overrides go to :func:`worker_env`;
    ``concurrency`` and ``pool`` to :class:`CeleryWorker` (its defaults when omitted);
    ``settings`` makes this process's settings the worker's (what a web process with the
    workers' ``MAILGUARD_*`` has), put back afterwards; ``current`` makes the client app the
    current Celery app (as a Django project's app is), the previous one put back afterwards.
    """
    with ExitStack() as cleanup:

        def start(
            *,
            concurrency: int | None = None,
            pool: str | None = None,
            settings: bool = False,
            current: bool = False,
            **overrides: str,
        ) -> Stack:
            env = worker_env(redis_url, smtp_server.url, **overrides)
            if settings:
                old = process_settings.use_settings(Settings.from_env(env))
                cleanup.callback(process_settings.use_settings, old)
            app = client_app(env)
            cleanup.callback(app.close)
            if current:
                previous = celery.current_app._get_current_object()
                app.set_current()
                cleanup.callback(previous.set_current)
            options: dict[str, object] = {}
            if concurrency is not None:
                options["concurrency"] = concurrency
            if pool is not None:
                options["pool"] = pool
            worker = CeleryWorker(env, **options)  # type: ignore[arg-type]
            cleanup.callback(worker.stop)
            worker.start()
            return Stack(env, app, worker, smtp_server)

        yield start
