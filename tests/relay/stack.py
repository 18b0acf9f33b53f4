"""A mailguard worker in front of a real Postfix: a redis-server of its own, a Celery worker
(a subprocess, prefork) whose ``MAILGUARD_SMTP_URL`` is the relay, and a client app.

:func:`relay_stack` builds one; the relay tests' module-scoped fixtures hold one each. What a
test checks is what arrived in the relay's Maildirs (:meth:`PostfixRelay.maildir`).
"""

from __future__ import annotations

import email
import email.policy
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

from celery import Celery
from celery.result import AsyncResult

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.postfix import PostfixRelay
from devservers.redis_servers import RedisServer
from tests.waiting import poll
from workers import tasks
from workers.waiting.outcomes import outcome_of

#: The relay tests' SASL login (a user of the relay's sasldb) and its password.
LOGIN, PASSWORD = "mailguard", "relay-secret"


@dataclass(frozen=True)
class RelayStack:
    """A running worker on ``redis`` sending through ``relay``, and the client app."""

    relay: PostfixRelay
    redis: RedisServer
    env: dict[str, str]
    app: Celery
    worker: CeleryWorker

    def send(self, to: str | list[str], **kwargs: Any) -> AsyncResult:
        """``send_mail.delay(to, subject=..., body=...)`` through the client app."""
        kwargs.setdefault("subject", "relay test")
        kwargs.setdefault("body", "through a real Postfix")
        return self.app.tasks[tasks.send_mail.name].delay(to, **kwargs)

    def settled(self, results: list[AsyncResult], timeout: float) -> list[dict[str, Any]]:
        """Wait until every mail's task has ended; their outcomes (a failed mail's too), in
        order."""
        poll(lambda: all(r.ready() for r in results), timeout, "every mail to settle")
        return [dict(outcome_of(r.info, r.state, r.id)) for r in results]


@contextmanager
def relay_stack(
    relay: PostfixRelay,
    smtp_url: str | None = None,
    *,
    process_env: Mapping[str, str] | None = None,
    **overrides: str,
) -> Iterator[RelayStack]:
    """A worker stack on ``relay`` (at ``smtp_url``, default the relay's plain URL).

    ``overrides`` are ``MAILGUARD_*`` values for :func:`worker_env`; ``process_env`` other
    variables of the worker process only (``SSL_CERT_FILE``). Everything started here stops
    on exit (the worker killed); the relay is the caller's.
    """
    with ExitStack() as cleanup:
        redis = RedisServer().start()
        cleanup.callback(redis.cleanup)
        overrides.setdefault("MAILGUARD_POLICY", "100/1s")
        env = worker_env(redis.url, smtp_url or relay.url, **overrides)
        app = client_app(env)
        cleanup.callback(app.close)
        worker = CeleryWorker({**env, **(process_env or {})})
        # SIGKILL at the end: each test has read every outcome it waits for, and its Redis goes
        # with it (a warm shutdown would add seconds per module, nothing checked).
        cleanup.callback(worker.kill)
        worker.start()
        yield RelayStack(relay, redis, env, app, worker)


def parsed(raw: bytes) -> EmailMessage:
    """A delivered Maildir file as a message."""
    message = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    return message


def message_ids(relay: PostfixRelay, user: str) -> list[str]:
    """The Message-IDs of the messages in ``user``'s Maildir, in delivery order."""
    return [str(parsed(raw)["Message-ID"]) for raw in relay.maildir(user)]
