"""mailguard's Celery app closes its result backend's connections: after ``app.close()`` the
results Redis holds none of the app's, the subscription ``apply_async`` opens to hear of the
result included (Celery's own close leaves them open until they are collected, and a socket
collected in a later test is reported there as an unclosed resource). The broker's
connections are kombu's, pooled per URL for every app in the process, and stay. The checker is
the server's own ``CLIENT LIST``, not the client's view."""

from __future__ import annotations

import gc

import pytest
import redis

from devservers.celery_worker import client_app, worker_env
from workers.app import MailguardApp, close_backend

pytestmark = [pytest.mark.redis]


def _clients(url: str, db: int) -> int:
    """Connections the server at ``url`` holds to database ``db`` (the checker's is on 15)."""
    admin = redis.Redis.from_url(url.rsplit("/", 1)[0] + "/15")
    try:
        return sum(1 for c in admin.client_list() if c.get("db") == str(db))
    finally:
        admin.close()


def test_close_closes_the_result_subscription_and_pool(redis_url: str) -> None:
    """Given an app that published a mail (its result subscribed to) and read its state, when
    it is closed, then the results Redis holds none of its connections, and the result
    collected afterwards opens none."""
    env = worker_env(redis_url, "smtp://127.0.0.1:1")
    results = int(env["MAILGUARD_RESULT_BACKEND"].rsplit("/", 1)[1])
    before = _clients(redis_url, results)
    app = client_app(env)
    assert isinstance(app, MailguardApp)
    result = app.send_task("mailguard.send_mail", args=["ada@example.com"], queue="mail")
    assert result.state == "PENDING"  # no worker: nothing ran
    assert _clients(redis_url, results) > before, "the app holds connections while open"
    app.close()
    assert _clients(redis_url, results) == before
    del result
    gc.collect()
    assert _clients(redis_url, results) == before


def test_closing_a_backend_never_raises() -> None:
    """A backend with no connections (an in-process cache), or none of the attributes a Redis
    backend has, closes quietly."""
    close_backend(object())
    app = client_app({"MAILGUARD_RESULT_BACKEND": "cache+memory://"})
    assert app.backend is not None
    app.close()
