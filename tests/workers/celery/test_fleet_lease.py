"""The fleet lease with real workers, real Redis and real SMTP: of two workers one polls the
schedule; SIGKILLed, the other takes the lease over and sends the mails parked meanwhile, each
once, never before its slot."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery.result import AsyncResult

from devservers.celery_worker import CeleryWorker, client_app, start_all, stop_all, worker_env
from devservers.smtp_server import SmtpTestServer
from mailer.mail.message import message_id
from tests.waiting import poll

TASK = "mailguard.send_mail"
SENDER = "mailguard@example.org"
EARLY_SLACK = 0.05  # seconds: the worker's and the SMTP server's clocks are the same clock
LEASE_KEY = "mailguard:{lease:promoter:mail}"

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def ledger(redis_url: str) -> Iterator[redis.Redis]:
    """The workers' ledger (db 0 of ``worker_env``), where the lease lives."""
    client = redis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/0")
    yield client
    client.close()


def _holder_pid(ledger: redis.Redis) -> int | None:
    """The main process id of the worker holding the lease (its token: host:pid:random)."""
    raw = ledger.get(LEASE_KEY)
    return None if raw is None else int(raw.decode().split(":")[1])


def _send(app: Any, to: str, mail_id: str) -> AsyncResult:
    return app.send_task(
        TASK, args=[to], kwargs={"subject": mail_id, "body": "x", "mail_id": mail_id}
    )


def test_the_holder_killed_another_worker_promotes(
    redis_url: str, smtp_server: SmtpTestServer, ledger: redis.Redis
) -> None:
    """Two workers: one holds the lease. It is SIGKILLed; three mails to one address under
    ``1/3s`` are sent, two of them parked; the other worker takes the lease and each mail is
    sent once, never before its slot."""
    env = worker_env(
        redis_url, smtp_server.url, MAILGUARD_POLICY="1/3s, 50/1h", MAILGUARD_PARK_AFTER="1s"
    )
    app = client_app(env)
    workers = start_all([CeleryWorker(env, name=f"w{n}") for n in range(2)])
    try:
        pids = {w.process.pid: w for w in workers if w.process is not None}
        poll(lambda: _holder_pid(ledger) in pids, 15, "one worker to take the lease")
        holder_pid = _holder_pid(ledger)
        assert holder_pid is not None
        pids[holder_pid].kill()
        (survivor,) = (w for pid, w in pids.items() if pid != holder_pid)
        results = [_send(app, "ada@example.com", f"lease-{n}") for n in range(3)]
        poll(lambda: all(r.ready() for r in results), 40, "every mail " + survivor.log()[-2000:])
        assert survivor.process is not None and _holder_pid(ledger) == survivor.process.pid
    finally:
        stop_all(workers)
        app.close()
    received: dict[str, list[float]] = {}
    for d in smtp_server.delivered:
        received.setdefault(str(d.message["Message-ID"]), []).append(d.received_at)
    dues = []
    for result in results:
        outcome = result.get(timeout=1)
        times = received[message_id(outcome["mail_id"], SENDER)]
        assert outcome["status"] == "sent" and len(times) == 1, (outcome, times)
        if outcome["due"] is not None:
            dues.append(outcome["due"])
            assert times[0] >= outcome["due"] - EARLY_SLACK, f"{outcome['mail_id']} sent early"
    assert len(dues) >= 2 and max(dues) - min(dues) >= 3, f"two mails waited: {dues}"
