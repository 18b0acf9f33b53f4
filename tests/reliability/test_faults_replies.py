"""Proportionate reactions on real Celery workers and a real SMTP server: greylisting and a
network condition hold nobody, temporary failures of several recipients do, and a guessed hold
never drops a mail before its deadline."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from celery import Celery
from celery.result import AsyncResult

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll
from workers import tasks

pytestmark = [pytest.mark.redis, pytest.mark.slow]

GREYLISTED = "451 4.7.1 <grey@example.com>: Recipient address rejected: try again later"
DROPPED = "421 4.4.2 mx.example.com Error: timeout exceeded"
PLAIN = "451 4.3.0 Mail server temporarily rejected message."
THROTTLE = "454 4.7.0 Throttling failure: Maximum sending rate exceeded."
#: Seconds by which the SMTP server's clock may see a booked mail before its slot.
EARLY = 0.05
#: The kind's wait in these tests, in seconds (the chaos run's ``code``).
CODE_WAIT = 8.0


def _code(app: Celery, to: str, n: int) -> tuple[AsyncResult, float]:
    """A ``code`` mail to ``to`` and the time it was asked for."""
    send_mail = app.tasks[tasks.send_mail.name]
    asked = time.time()
    kwargs = {"kind": "code", "context": {"code": f"{n:06d}"}}
    return send_mail.apply_async(args=[to], kwargs=kwargs), asked


def _rcpts(smtp: SmtpTestServer, address: str) -> list[tuple[float, str]]:
    return [(t, reply[:3]) for t, _, rcpt, reply in smtp.events("RCPT") if rcpt == address]


def test_greylisting_and_a_dropped_connection_hold_nobody(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """One recipient greylisted on its first RCPT (451 4.7.1), one answered 421 4.4.2, 20
    other mails behind them, kind ``code`` waiting 8 s: the 20 are sent within 8 s of their
    request, no hold starts, the greylisted mail is sent after its 2 s delay, and each mail
    is delivered once."""
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="1/1s, 3/5s, 5/20s",
        MAILGUARD_KIND_CODE_MAX_WAIT=f"{CODE_WAIT:g}s",
        MAILGUARD_GREYLIST_DELAY="2s",
    )
    app = client_app(env)
    worker = CeleryWorker(env).start()
    smtp_server.fail_rcpt_for("grey@example.com", GREYLISTED)
    smtp_server.fail_rcpt_for("net@example.com", DROPPED)
    try:
        grey = _code(app, "grey@example.com", 0)
        net = _code(app, "net@example.com", 1)
        others = [_code(app, f"user{n}@example.com", n) for n in range(2, 22)]
        mails = [grey, net, *others]
        poll(lambda: all(r.ready() for r, _ in mails), 30, "every mail to settle")
        log = worker.log()
    finally:
        worker.stop()
        app.close()
    outcomes = [r.get(timeout=1) for r, _ in mails]
    assert [o["status"] for o in outcomes] == ["sent"] * 22, outcomes
    late = [o["sent_at"] - asked for o, (_, asked) in zip(outcomes[2:], others, strict=True)]
    assert max(late) < CODE_WAIT, late
    assert "hold started" not in log, "neither reply holds the sender"
    assert Counter(o["reason"] for o in outcomes) == Counter({None: 22})
    tries = _rcpts(smtp_server, "grey@example.com")
    assert [code for _, code in tries] == ["451", "250"], tries
    assert tries[1][0] >= tries[0][0] + 2.0 - EARLY, "tried again after the greylisting delay"
    assert [code for _, code in _rcpts(smtp_server, "net@example.com")] == ["421", "250"]
    ids = Counter(d.message["Message-ID"] for d in smtp_server.delivered)
    assert len(ids) == 22 and set(ids.values()) == {1}


def test_temporary_failures_of_three_recipients_hold_the_sender_two_do_not(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """Plain 4xx for two recipients start nothing (both retried and sent); a third distinct
    recipient failing within the 10 s window starts one sender hold (cause: evidence), after
    which every mail is delivered once."""
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="100/1s",
        MAILGUARD_SMTP_ATTEMPTS="1",
        MAILGUARD_THROTTLE_HOLD="2s",
        MAILGUARD_HOLD_EVIDENCE="3/10s",
    )
    app = client_app(env)
    worker = CeleryWorker(env).start()
    send_mail = app.tasks[tasks.send_mail.name]
    for address in ("ada@example.com", "bob@example.com", "cy@example.com"):
        smtp_server.fail_rcpt_for(address, PLAIN)
    try:
        two = [
            send_mail.delay(to, subject="s", body="b")
            for to in ("ada@example.com", "bob@example.com")
        ]
        poll(lambda: all(r.ready() for r in two), 15, "two failing recipients to be sent")
        calm = worker.log()
        third = send_mail.delay("cy@example.com", subject="s", body="b")
        poll(lambda: third.state == "DEFERRED" or third.ready(), 15, "the third to be held")
        held = dict(third.info) if third.state == "DEFERRED" else {}
        after = send_mail.delay("dee@example.com", subject="s", body="b")
        results = [*two, third, after]
        poll(lambda: all(r.ready() for r in results), 20, "every mail to settle")
        log = worker.log()
    finally:
        worker.stop()
        app.close()
    assert "hold started" not in calm, "two recipients are not evidence enough"
    assert [r.get(timeout=1)["status"] for r in results] == ["sent"] * 4
    assert (held.get("reason"), held.get("hold")) == ("held", "sender"), held
    assert log.count("hold started: sender") == 1, log[-3000:]
    assert "3 recipients failed within 10s" in log
    refused = _rcpts(smtp_server, "cy@example.com")[0][0]
    dee = _rcpts(smtp_server, "dee@example.com")
    assert dee and dee[0][0] >= refused + 2.0 - EARLY, "dee's mail waited for the hold"
    ids = Counter(d.message["Message-ID"] for d in smtp_server.delivered)
    assert len(ids) == 4 and set(ids.values()) == {1}


def test_a_guessed_hold_past_a_code_deadline_drops_nothing(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """454 Throttling failure without a stated delay holds the sender for a guessed 60 s, past
    a ``code`` mail's 4 s: the throttled mail and one asked for during the hold are each sent
    just before their deadline, not dropped."""
    wait = 4.0
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="100/1s",
        MAILGUARD_KIND_CODE_MAX_WAIT=f"{wait:g}s",
        MAILGUARD_THROTTLE_HOLD="60s",
    )
    app = client_app(env)
    worker = CeleryWorker(env).start()
    smtp_server.fail_rcpt(THROTTLE, times=1)
    try:
        first = _code(app, "ada@example.com", 0)
        poll(lambda: first[0].state == "DEFERRED", 10, "the throttled mail to be held")
        second = _code(app, "bob@example.com", 1)
        mails = [first, second]
        poll(lambda: all(r.ready() for r, _ in mails), 15, "both mails to settle")
        log = worker.log()
    finally:
        worker.stop()
        app.close()
    outcomes = [r.get(timeout=1) for r, _ in mails]
    assert [o["status"] for o in outcomes] == ["sent", "sent"], outcomes
    for outcome, (_, asked) in zip(outcomes, mails, strict=True):
        assert asked + wait - 1.5 <= outcome["sent_at"] <= asked + wait + 0.5, outcome
    assert log.count("hold started: sender") == 1
    assert len(smtp_server.delivered) == 2
