"""Holds on real Celery workers and a real SMTP server: a throttling reply holds every worker, a
recipient throttle holds that recipient alone, a limiter outage while the hold is written sends
nothing unguarded."""

from __future__ import annotations

import itertools
import time
from collections import Counter

import pytest
from celery.result import AsyncResult

from devservers.celery_worker import CeleryWorker, client_app, start_all, stop_all, worker_env
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll
from workers import tasks

pytestmark = [pytest.mark.redis, pytest.mark.slow]

THROTTLE = "454 4.7.0 Throttling failure: Maximum sending rate exceeded."
#: Seconds by which the SMTP server's clock may see a booked mail before its slot.
EARLY = 0.05


def _send(app: object, to: str, n: int) -> AsyncResult:
    send_mail = app.tasks[tasks.send_mail.name]  # type: ignore[attr-defined]
    return send_mail.apply_async(args=[to], kwargs={"subject": f"n{n}", "body": "b"})  # type: ignore[no-any-return]


def _refused_at(smtp: SmtpTestServer, code: str) -> float:
    return next(t for t, _, _, reply in smtp.events("RCPT") if reply.startswith(code))


def test_a_throttling_reply_holds_two_workers_then_every_mail_goes_once_in_order(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """454 once: no RCPT or DATA reaches the server during the 2 s hold, from either worker;
    afterwards the held mail and the six enqueued during the hold are delivered exactly once,
    paced by the sender tier in booking order."""
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="recipient: 10/1s; sender: 3/1s",
        MAILGUARD_THROTTLE_HOLD="2s",
    )
    app = client_app(env)
    workers = start_all([CeleryWorker(env, name=f"w{n}") for n in (1, 2)])
    smtp_server.fail_rcpt(THROTTLE, times=1)
    try:
        first = _send(app, "user0@example.com", 0)
        poll(lambda: first.state == "DEFERRED", 15, "the throttled mail to be held")
        held = dict(first.info)
        rest = [_send(app, f"user{n}@example.com", n) for n in range(1, 7)]
        results = [first, *rest]
        poll(lambda: all(r.ready() for r in results), 20, "every mail to settle")
        logs = "".join(w.log() for w in workers)
    finally:
        stop_all(workers)
        app.close()
    throttled = _refused_at(smtp_server, "454")
    assert (held["reason"], held["hold"], held["smtp_code"]) == ("held", "sender", 454), held
    assert held["due"] >= throttled + 2.0 - EARLY
    during = [e for e in smtp_server.events() if throttled < e[0] < throttled + 2.0 - EARLY]
    assert during == [], "no worker opened a transaction during the hold"
    outcomes = [r.get(timeout=1) for r in results]
    assert {o["status"] for o in outcomes} == {"sent"}, outcomes
    ids = Counter(d.message["Message-ID"] for d in smtp_server.delivered)
    assert len(ids) == 7 and set(ids.values()) == {1}, "every mail delivered exactly once"
    due = {o["message_id"]: o["due"] for o in outcomes}
    arrivals = sorted(smtp_server.delivered, key=lambda d: d.received_at)
    order = [due[d.message["Message-ID"]] for d in arrivals]
    assert all(b >= a - 0.3 for a, b in itertools.pairwise(order)), order
    assert all(d.received_at >= due[d.message["Message-ID"]] - EARLY for d in arrivals)
    assert logs.count("hold started: sender until") == 1, "one line when the hold starts"
    assert "hold ended: sender" in logs


def test_a_recipient_throttle_holds_that_recipient_alone(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """450 4.2.1 for ada: her mail and the next one to her go after the 2 s hold; a mail to bob
    enqueued meanwhile goes at once."""
    env = worker_env(
        redis_url, smtp_server.url, MAILGUARD_POLICY="100/1s", MAILGUARD_THROTTLE_HOLD="2s"
    )
    app = client_app(env)
    worker = CeleryWorker(env).start()
    smtp_server.fail_rcpt_for(
        "ada@example.com", "450 4.2.1 The user you are trying to contact is receiving mail at a "
        "rate that prevents additional messages from being delivered."
    )  # fmt: skip
    try:
        first = _send(app, "ada@example.com", 0)
        poll(lambda: first.state == "DEFERRED", 15, "ada's mail to be held")
        held = dict(first.info)
        second = _send(app, "ada@example.com", 1)
        bob = _send(app, "bob@example.com", 2)
        bob_outcome = bob.get(timeout=15)
        outcomes = [first.get(timeout=15), second.get(timeout=15)]
    finally:
        worker.stop()
        app.close()
    refused = _refused_at(smtp_server, "450")
    assert (held["reason"], held["hold"]) == ("held", "recipient"), held
    assert bob_outcome["status"] == "sent" and bob_outcome["sent_at"] < refused + 2.0
    assert [o["status"] for o in outcomes] == ["sent", "sent"]
    assert all(o["sent_at"] >= refused + 2.0 - EARLY for o in outcomes), outcomes
    ada = [e for e in smtp_server.events("RCPT") if e[2] == "ada@example.com"]
    assert [e[3][:3] for e in ada] == ["450", "250", "250"]
    assert len(smtp_server.delivered) == 3


def test_limiter_down_while_the_hold_is_written_sends_nothing_unguarded(
    redis_url: str, own_redis: RedisServer, smtp_server: SmtpTestServer
) -> None:
    """The limiter's Redis dies as the server answers 454: the hold cannot be written, and no
    mail goes out (fail_closed) until it is back; then each is delivered exactly once."""
    base = redis_url.rsplit("/", 1)[0]
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="100/1s",
        MAILGUARD_THROTTLE_HOLD="2s",
        MAILGUARD_LIMITER_URL=own_redis.url,
        MAILGUARD_LEDGER_URL=f"{base}/3",
        MAILGUARD_MAX_COUNTDOWN="1s",
    )
    app = client_app(env)
    worker = CeleryWorker(env).start()
    smtp_server.fail_rcpt_for("ada@example.com", THROTTLE)
    smtp_server.handler.on_refusal = lambda _address, _reply: own_redis.stop()
    try:
        first = _send(app, "ada@example.com", 0)
        poll(lambda: first.state == "DEFERRED", 15, "the throttled mail to be deferred")
        assert first.info["reason"] == "limiter_unavailable", first.info
        others = [_send(app, f"user{n}@example.com", n) for n in range(1, 4)]
        time.sleep(2.0)
        assert smtp_server.delivered == [], "nothing sent while the limiter is down"
        assert [e[3][:3] for e in smtp_server.events("RCPT")] == ["454"]
        own_redis.start()
        results = [first, *others]
        poll(lambda: all(r.ready() for r in results), 20, "every mail to settle")
    finally:
        worker.stop()
        app.close()
    assert [r.get(timeout=1)["status"] for r in results] == ["sent"] * 4
    ids = Counter(d.message["Message-ID"] for d in smtp_server.delivered)
    assert len(ids) == 4 and set(ids.values()) == {1}
