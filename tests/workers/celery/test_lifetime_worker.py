"""A mail outlives a relay that refuses it for longer than 0.1.0's whole retry budget: a real
prefork worker, redis-server and the aiosmtpd server, the backoff shortened by settings (not
the promise)."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll
from workers import tasks

pytestmark = [pytest.mark.redis, pytest.mark.slow]

REFUSED = "451 4.3.0 Mail server temporarily rejected message."
#: The refusals before the relay accepts: with SEND_RETRIES 2 and SMTP_ATTEMPTS 1, 0.1.0
#: failed the mail (``retries_exhausted``) at its third.
REFUSALS = 6


def test_a_mail_refused_longer_than_the_old_budget_is_delivered_once(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """DATA refused with 451 six times, then accepted: every run before is deferred on its own
    backoff (1 s, then 2 s: the cap), the waits past PARK_AFTER parked, never failed; the
    seventh try delivers the mail, once, and its outcome counts the seven tries."""
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="100/1s",
        MAILGUARD_SMTP_ATTEMPTS="1",
        MAILGUARD_SEND_RETRIES="2",  # 0.1.0's name: accepted, it bounds nothing now
        MAILGUARD_RETRY_BACKOFF="1s",
        MAILGUARD_RETRY_BACKOFF_MAX="2s",
        MAILGUARD_PARK_AFTER="1500ms",
    )
    app = client_app(env)
    worker = CeleryWorker(env).start()
    smtp_server.fail_data(REFUSED, times=REFUSALS)
    try:
        send_mail = app.tasks[tasks.send_mail.name]
        result = send_mail.delay("ada@example.com", subject="Your order", body="Shipped.")
        poll(result.ready, 60, "the mail to settle")
        log = worker.log()
        outcome = result.get(timeout=1)
    finally:
        worker.stop()
        app.close()
    assert (outcome["status"], outcome["reason"]) == ("sent", None), outcome
    assert outcome["attempts"] == REFUSALS + 1
    assert smtp_server.handler.data_commands == REFUSALS + 1
    ids = Counter(d.message["Message-ID"] for d in smtp_server.delivered)
    assert list(ids.values()) == [1]
    assert "parked until" in log, "the 2 s waits are parked, not held by the worker"
    assert "retries exhausted" not in log


GREYLISTED = "451 4.7.1 <grey@example.com>: Recipient address rejected: try again later"
#: Seconds by which the SMTP server's clock may see a try before its time.
EARLY = 0.05


def test_greylisting_follows_its_schedule_across_parking_and_never_fails(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """RCPT greylisted three times (GREYLIST_DELAY 1 s): the tries come 1, 5 and 10 s apart
    (the schedule's steps, each wait past PARK_AFTER parked and its step carried through the
    schedule), the fourth is accepted: delivered once, never failed."""
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="100/1s",
        MAILGUARD_SMTP_ATTEMPTS="1",
        MAILGUARD_SEND_RETRIES="0",
        MAILGUARD_GREYLIST_DELAY="1s",
        MAILGUARD_PARK_AFTER="1500ms",
    )
    app = client_app(env)
    worker = CeleryWorker(env).start()
    smtp_server.fail_rcpt_for("grey@example.com", GREYLISTED, times=3)
    try:
        send_mail = app.tasks[tasks.send_mail.name]
        result = send_mail.delay("grey@example.com", subject="Hello", body="World")
        poll(result.ready, 60, "the greylisted mail to settle")
        outcome = result.get(timeout=1)
    finally:
        worker.stop()
        app.close()
    assert outcome["status"] == "sent", outcome
    tries = [(t, reply[:3]) for t, _, _, reply in smtp_server.events("RCPT")]
    assert [code for _, code in tries] == ["451", "451", "451", "250"], tries
    gaps = [later[0] - earlier[0] for earlier, later in pairwise(tries)]
    for gap, step in zip(gaps, (1.0, 5.0, 10.0), strict=True):
        assert gap >= step - EARLY, gaps
    assert gaps[2] > gaps[1] > gaps[0], gaps
    assert len(smtp_server.delivered) == 1
