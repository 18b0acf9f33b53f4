"""Faults end to end: broker redelivery, killed workers, the limiter's Redis going away.

Every test runs a real ``celery worker`` subprocess against a real redis-server and a real
aiosmtpd server, and counts the mails the server accepted. "Exactly one" means: the server
committed (answered 250 to) exactly one message for the call. A worker killed while the server
was still receiving the message never got that 250, so that message was never accepted; the
redelivered task sends it. (A kill in the milliseconds after the 250 and before the outcome is
recorded is the documented at-least-once window of ``mailer/ledger``; it is not tested here.)
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Iterator

import pytest
import redis
from celery import Celery
from celery.result import AsyncResult

from devservers.celery_worker import CeleryWorker, client_app, stop_all, worker_env
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll

TASK = "mailguard.send_mail"


def runs(worker: CeleryWorker, task_id: str) -> int:
    """How many times the worker received the task ``task_id`` (deliveries and retries)."""
    return len(re.findall(rf"Task {TASK}\[{re.escape(task_id)}\] received", worker.log()))


def broker_drained(broker_url: str, queue: str = "mail") -> Callable[[], bool]:
    """True once no message is queued or held unacknowledged (no copy left that could run)."""
    client = redis.Redis.from_url(broker_url)

    def drained() -> bool:
        return client.llen(queue) == 0 and client.hlen("unacked") == 0

    return drained


@pytest.fixture
def apps() -> Iterator[list[Celery]]:
    """Client apps made by a test, closed afterwards."""
    made: list[Celery] = []
    yield made
    for app in made:
        app.close()


@pytest.fixture
def workers() -> Iterator[list[CeleryWorker]]:
    """Workers started by a test, stopped (or killed) afterwards."""
    started: list[CeleryWorker] = []
    yield started
    stop_all(started, timeout=10)


def start(workers: list[CeleryWorker], env: dict[str, str], **options: object) -> CeleryWorker:
    worker = CeleryWorker(env, **options)  # type: ignore[arg-type]
    workers.append(worker)
    return worker.start()


def test_redelivery_past_the_visibility_timeout_sends_one_mail(
    redis_url: str,
    smtp_server: SmtpTestServer,
    workers: list[CeleryWorker],
    apps: list[Celery],
) -> None:
    """A countdown (~4 s) longer than the visibility timeout (1 s): redelivered, one mail each."""
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="1/4s",
        MAILGUARD_VISIBILITY_TIMEOUT="1s",
        MAILGUARD_RESTORE_INTERVAL="300ms",
    )
    worker = start(workers, env)
    app = client_app(env)
    apps.append(app)
    first = app.send_task(TASK, args=["ada@example.com"], kwargs={"subject": "s0", "body": "b"})
    assert first.get(timeout=10)["status"] == "sent"
    second = app.send_task(TASK, args=["ada@example.com"], kwargs={"subject": "s1", "body": "b"})
    poll(lambda: second.state == "DEFERRED", 5, "the second mail to be deferred")
    assert second.info["reason"] == "booked" and second.info["wait"] > 3
    outcome = second.get(timeout=20)
    assert outcome["status"] == "sent" and outcome["deferrals"] == 1
    poll(broker_drained(env["MAILGUARD_BROKER_URL"]), 20, "every redelivered copy to finish")
    # the first run, the retry with the countdown, and at least one copy the broker restored
    assert runs(worker, second.id) >= 3, worker.log()
    assert len(smtp_server.delivered) == 2
    assert smtp_server.handler.data_commands == 2, "no copy even tried to send again"
    assert [d.message["Subject"] for d in smtp_server.delivered] == ["s0", "s1"]
    assert AsyncResult(second.id, app=app).get(timeout=1)["sent_at"] == outcome["sent_at"]


def test_sigkill_of_the_pool_child_mid_send_sends_one_mail(
    redis_url: str,
    smtp_server: SmtpTestServer,
    workers: list[CeleryWorker],
    apps: list[Celery],
) -> None:
    """The pool child dies while the server holds DATA: the task is requeued and sent once."""
    env = worker_env(redis_url, smtp_server.url, MAILGUARD_CLAIM_LEASE="1s")
    worker = start(workers, env, concurrency=1)
    app = client_app(env)
    apps.append(app)
    smtp_server.slow_data(5.0)
    result = app.send_task(TASK, args=["bob@example.com"], kwargs={"subject": "s", "body": "b"})
    poll(lambda: smtp_server.handler.data_commands == 1, 10, "the child to be in DATA")
    worker.kill_child()
    poll(lambda: smtp_server.handler.data_aborted == 1, 5, "the server to drop the message")
    outcome = result.get(timeout=20)
    assert outcome["status"] == "sent"
    poll(broker_drained(env["MAILGUARD_BROKER_URL"]), 10, "the broker to be drained")
    assert "WorkerLostError" in worker.log() or "SIGKILL" in worker.log()
    assert runs(worker, result.id) >= 2, "the killed run was delivered again"
    assert len(smtp_server.delivered) == 1
    assert smtp_server.handler.data_commands == 2, "one killed send, one accepted"


def test_sigkill_of_the_worker_mid_send_sends_one_mail_from_another_worker(
    redis_url: str,
    smtp_server: SmtpTestServer,
    workers: list[CeleryWorker],
    apps: list[Celery],
) -> None:
    """The whole worker dies mid-send; a second worker restores the unacked task and sends once."""
    env = worker_env(redis_url, smtp_server.url, MAILGUARD_CLAIM_LEASE="1s")
    first = start(workers, env, concurrency=1, name="w1")
    app = client_app(env)
    apps.append(app)
    smtp_server.slow_data(5.0)
    result = app.send_task(TASK, args=["cy@example.com"], kwargs={"subject": "s", "body": "b"})
    poll(lambda: smtp_server.handler.data_commands == 1, 10, "the worker to be in DATA")
    first.kill()
    poll(lambda: smtp_server.handler.data_aborted == 1, 5, "the server to drop the message")
    broker = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
    assert broker.hlen("unacked") == 1, "the task is left unacknowledged, not lost"
    second = start(
        workers,
        env | {"MAILGUARD_VISIBILITY_TIMEOUT": "1s", "MAILGUARD_RESTORE_INTERVAL": "300ms"},
        concurrency=1,
        name="w2",
    )
    outcome = result.get(timeout=20)
    assert outcome["status"] == "sent"
    poll(broker_drained(env["MAILGUARD_BROKER_URL"]), 10, "the broker to be drained")
    assert runs(first, result.id) == 1 and runs(second, result.id) >= 1
    assert len(smtp_server.delivered) == 1
    assert smtp_server.handler.data_commands == 2, "one killed send, one accepted"


def limiter_down_env(
    redis_url: str, limiter: RedisServer, smtp: SmtpTestServer, **extra: str
) -> dict[str, str]:
    """Broker and results on ``redis_url``, the limiter (and by default the ledger) on its own."""
    return worker_env(
        redis_url,
        smtp.url,
        MAILGUARD_LIMITER_URL=limiter.url,
        MAILGUARD_MAX_COUNTDOWN="1s",  # backoff 0.2, 0.4, 0.8, then 1 s: recovery is quick
        **extra,
    )


def test_limiter_down_fail_closed_sends_nothing_then_everything_when_it_is_back(
    redis_url: str,
    own_redis: RedisServer,
    smtp_server: SmtpTestServer,
    workers: list[CeleryWorker],
    apps: list[Celery],
) -> None:
    """fail_closed: no mail while the limiter's Redis is down (DEFERRED), all once it is back."""
    env = limiter_down_env(redis_url, own_redis, smtp_server)
    start(workers, env)
    app = client_app(env)
    apps.append(app)
    own_redis.stop()
    results = [
        app.send_task(TASK, args=[f"user{n}@example.com"], kwargs={"subject": "s", "body": "b"})
        for n in range(3)
    ]

    def backed_off() -> bool:
        # wait 0.8 s means this is the mail's third run that found the limiter down
        return all(
            r.state == "DEFERRED"
            and r.info["reason"] == "ledger_unavailable"  # one Redis: the claim comes first
            and r.info["wait"] >= 0.8
            for r in results
        )

    poll(backed_off, 15, "every mail to be deferred three times")
    assert smtp_server.handler.rcpt_commands == 0 and smtp_server.delivered == []
    own_redis.start()
    outcomes = [r.get(timeout=15) for r in results]
    assert [(o["status"], o["detail"]) for o in outcomes] == [("sent", None)] * 3
    assert len(smtp_server.delivered) == 3
    assert sorted(d.rcpt_tos[0] for d in smtp_server.delivered) == [
        f"user{n}@example.com" for n in range(3)
    ]


def test_limiter_down_fail_open_sends_unguarded(
    redis_url: str,
    own_redis: RedisServer,
    smtp_server: SmtpTestServer,
    workers: list[CeleryWorker],
    apps: list[Celery],
) -> None:
    """fail_open: with the limiter's Redis down, mails go out at once, "sent unguarded"."""
    env = limiter_down_env(
        redis_url,
        own_redis,
        smtp_server,
        MAILGUARD_FAIL_MODE="fail_open",
        MAILGUARD_LEDGER_URL=redis_url.rsplit("/", 1)[0] + "/3",  # the ledger stays up
    )
    start(workers, env)
    app = client_app(env)
    apps.append(app)
    own_redis.stop()
    results = [  # two to one recipient: the policy (1/1s) would defer the second
        app.send_task(TASK, args=["dee@example.com"], kwargs={"subject": f"s{n}", "body": "b"})
        for n in range(2)
    ]
    outcomes = [r.get(timeout=15) for r in results]
    assert [(o["status"], o["detail"], o["deferrals"]) for o in outcomes] == [
        ("sent", "sent unguarded", 0)
    ] * 2
    assert len(smtp_server.delivered) == 2


def test_limiter_and_ledger_down_fail_open_still_sends_nothing(
    redis_url: str,
    own_redis: RedisServer,
    smtp_server: SmtpTestServer,
    workers: list[CeleryWorker],
    apps: list[Celery],
) -> None:
    """fail_open, the ledger on the limiter's Redis: no claim is possible, so no mail (deferred)."""
    env = limiter_down_env(redis_url, own_redis, smtp_server, MAILGUARD_FAIL_MODE="fail_open")
    start(workers, env)
    app = client_app(env)
    apps.append(app)
    own_redis.stop()
    result = app.send_task(TASK, args=["eve@example.com"], kwargs={"subject": "s", "body": "b"})
    poll(
        lambda: result.state == "DEFERRED" and result.info["wait"] >= 0.8,
        15,
        "the mail to be deferred three times",
    )
    assert result.info["reason"] == "ledger_unavailable"
    assert smtp_server.handler.rcpt_commands == 0 and smtp_server.delivered == []
    own_redis.start()
    assert result.get(timeout=15)["detail"] is None, "sent guarded once the limiter is back"
    assert len(smtp_server.delivered) == 1


def test_limiter_redis_frozen_defers_then_sends(
    redis_url: str,
    own_redis: RedisServer,
    smtp_server: SmtpTestServer,
    workers: list[CeleryWorker],
    apps: list[Celery],
) -> None:
    """A limiter Redis that hangs (SIGSTOP, socket timeouts) defers like one that is down."""
    env = limiter_down_env(redis_url, own_redis, smtp_server)
    start(workers, env, concurrency=1)
    app = client_app(env)
    apps.append(app)
    assert own_redis.process is not None
    own_redis.process.send_signal(signal.SIGSTOP)
    try:
        result = app.send_task(TASK, args=["fay@example.com"], kwargs={"subject": "s", "body": "b"})
        poll(lambda: result.state != "PENDING", 10, "the first run to end")
        assert result.state == "DEFERRED", (result.state, result.info)
        assert result.info["reason"] == "ledger_unavailable"  # one Redis: the claim comes first
        assert smtp_server.handler.rcpt_commands == 0
    finally:
        own_redis.process.send_signal(signal.SIGCONT)
    assert result.get(timeout=15)["status"] == "sent"
    assert len(smtp_server.delivered) == 1
