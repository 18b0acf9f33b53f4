"""The guard through a RabbitMQ broker: a real node started by the suite, a real worker.

Results and the limiter stay on Redis; only the broker changes. Send, booking, drop, and a
worker SIGKILLed while it holds booked mails (RabbitMQ redelivers them to the next worker).
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from celery.result import AsyncResult

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.rabbitmq import RabbitServer
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll

TASK = "mailguard.send_mail"


def amqp_env(rabbit: RabbitServer, redis_url: str, smtp: SmtpTestServer) -> dict[str, str]:
    """A worker on ``rabbit`` with a queue of its own (tests share the node)."""
    return worker_env(
        redis_url,
        smtp.url,
        MAILGUARD_BROKER_URL=rabbit.url,
        MAILGUARD_QUEUE=f"mail-{uuid.uuid4().hex[:8]}",
        MAILGUARD_POLICY="1/1s, 3/5s",
        MAILGUARD_MAX_COUNTDOWN="2s",
        MAILGUARD_KIND_BURST_MAX_WAIT="6s",
        MAILGUARD_KIND_BURST_SUBJECT="Burst {{ n }}",
        MAILGUARD_KIND_BURST_BODY="Mail number {{ n }}",
    )


def settle(results: list[AsyncResult[Any]], timeout: float) -> list[Any]:
    poll(lambda: all(r.ready() for r in results), timeout, "every mail to settle")
    return [r.get(timeout=1, propagate=False) for r in results]


def test_send_book_and_drop_through_rabbitmq(
    rabbit: RabbitServer, redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """8 mails to one address under ``1/1s, 3/5s`` (tolerance 6 s): one now, booked ones at
    their slots, the rest dropped; each sent mail delivered once."""
    env = amqp_env(rabbit, redis_url, smtp_server)
    worker = CeleryWorker(env).start()
    app = client_app(env)
    try:
        results = [
            app.send_task(
                TASK, args=["ada@example.com"], kwargs={"kind": "burst", "context": {"n": n}}
            )
            for n in range(8)
        ]
        outcomes = settle(results, timeout=30)
    finally:
        worker.stop()
        app.close()
    statuses = Counter(o["status"] for o in outcomes)
    sent = [o for o in outcomes if o["status"] == "sent"]
    assert statuses["sent"] >= 3 and statuses["dropped"] >= 1, statuses
    assert statuses["sent"] + statuses["dropped"] == 8, outcomes
    assert any(o["deferrals"] for o in sent), "some mails waited for their booked slot"
    for o in sent:
        if o["deferrals"]:
            assert float(o["sent_at"]) >= float(o["due"]) - 0.05, "never before the slot"
    assert {o["reason"] for o in outcomes if o["status"] == "dropped"} == {"rate_limited"}
    assert len(smtp_server.delivered) == statuses["sent"]


def test_a_worker_killed_holding_booked_mails_hands_them_to_the_next(
    rabbit: RabbitServer, redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """SIGKILL of a worker that holds countdown mails: RabbitMQ requeues them at once, a new
    worker sends each exactly once, none before its slot."""
    env = amqp_env(rabbit, redis_url, smtp_server)
    env["MAILGUARD_CLAIM_LEASE"] = "2s"  # a run killed mid-claim frees its mail in 2 s
    first = CeleryWorker(env, name="first").start()
    app = client_app(env)
    second = CeleryWorker(env, name="second")
    try:
        results = [
            app.send_task(
                TASK,
                args=[f"user{r}@example.com"],
                kwargs={"subject": f"m{r}-{n}", "body": "x", "mail_id": f"kill-{r}-{n}"},
            )
            for n in range(3)
            for r in range(3)
        ]
        # Each recipient's first mail goes now, its next two wait 1 s and 2 s: kill the worker
        # while at least three of them still wait (the +1 s ones may already have left).
        poll(
            lambda: (
                sum(r.state == "SUCCESS" for r in results) >= 3
                and sum(r.state == "DEFERRED" for r in results) >= 3
            ),
            30,
            "three sent mails and three waiting for their slot",
        )
        first.kill()
        second.start()
        outcomes = settle(results, timeout=60)
    finally:
        first.kill()
        second.stop()
        app.close()
    assert [o["status"] for o in outcomes] == ["sent"] * 9, outcomes
    copies = Counter(d.message["Subject"] for d in smtp_server.delivered)
    assert sorted(copies) == sorted(f"m{r}-{n}" for n in range(3) for r in range(3))
    assert set(copies.values()) == {1}, "each mail once"
    for o in outcomes:
        if o["due"] is not None:
            assert float(o["sent_at"]) >= float(o["due"]) - 0.05


def test_parked_mails_through_rabbitmq(
    rabbit: RabbitServer, redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """With a RabbitMQ broker, mails booked longer ahead than ``PARK_AFTER`` (1 s) are parked
    in the schedule on Redis (not in the broker), promoted and sent once each, never before
    their slot and within a second of it."""
    env = amqp_env(rabbit, redis_url, smtp_server) | {
        "MAILGUARD_POLICY": "1/2s, 50/1h",
        "MAILGUARD_PARK_AFTER": "1s",
    }
    worker = CeleryWorker(env).start()
    app = client_app(env)
    try:
        results = [
            app.send_task(TASK, args=["ada@example.com"], kwargs={"subject": "s", "body": "b"})
            for _ in range(3)
        ]
        poll(lambda: "parked until" in worker.log(), 10, "a mail to be parked")
        outcomes = settle(results, timeout=30)
    finally:
        worker.stop()
        app.close()
    assert [o["status"] for o in outcomes] == ["sent"] * 3, outcomes
    assert len(smtp_server.delivered) == 3
    assert worker.log().count("parked until") == 2
    for o in outcomes:
        assert -0.05 <= float(o["sent_at"]) - float(o["due"]) <= 1.0, o
