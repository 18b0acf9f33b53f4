"""The guard end to end: a real Celery worker, a real Redis (broker, results, limiter), aiosmtpd.

Time-compressed policy ``1/1s, 3/5s, 5/20s``, so a burst plays out in seconds.
"""

from __future__ import annotations

import time
import warnings

import pytest
from celery import Celery
from celery.result import AsyncResult

from devservers.celery_worker import CeleryWorker, worker_env
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from mailer.factory import build_ledger
from mailer.settings import Settings
from tests.waiting import poll
from tests.workers.conftest import StackFactory

TASK = "mailguard.send_mail"


@pytest.fixture
def burst_stack(stack: StackFactory) -> tuple[Celery, CeleryWorker, SmtpTestServer]:
    """A worker (prefork, 2 processes) and a client app sharing one configuration."""
    parts = stack(
        MAILGUARD_KIND_BURST_MAX_WAIT="8s",
        MAILGUARD_KIND_BURST_SUBJECT="Burst {{ n }}",
        MAILGUARD_KIND_BURST_BODY="Mail number {{ n }}",
    )
    return parts.app, parts.worker, parts.smtp


def wait_all(results: list[AsyncResult], timeout: float) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(r.ready() for r in results):
        time.sleep(0.1)
    return [r.get(timeout=1) for r in results]


def test_burst_sends_defers_to_booked_slots_and_drops_the_excess(
    burst_stack: tuple[Celery, CeleryWorker, SmtpTestServer],
) -> None:
    """12 mails at once: 1 sent now, 4 at their booked times (±0.5 s), 7 dropped; one each."""
    app, worker, smtp = burst_stack
    results = [
        app.send_task(TASK, args=["Ada@Example.com"], kwargs={"kind": "burst", "context": {"n": i}})
        for i in range(12)
    ]
    time.sleep(1.0)
    states = [r.state for r in results]
    assert states.count("DEFERRED") >= 3, states
    deferred = next(r for r in results if r.state == "DEFERRED")
    assert deferred.info["reason"] == "booked" and deferred.info["due"] > time.time() - 1
    outcomes = wait_all(results, timeout=20)
    sent = [o for o in outcomes if o["status"] == "sent"]
    dropped = [o for o in outcomes if o["status"] == "dropped"]
    assert len(sent) == 5 and len(dropped) == 7
    assert all(o["reason"] == "rate_limited" and o["tier"] == "5/20s" for o in dropped)
    assert sum(1 for o in sent if o["deferrals"] == 0) == 1
    for o in sent:
        if o["deferrals"]:
            assert abs(float(o["sent_at"]) - float(o["due"])) <= 0.5, o  # type: ignore[arg-type]
    times = sorted(float(o["sent_at"]) for o in sent)  # type: ignore[arg-type]
    offsets = [round(t - times[0]) for t in times]
    assert offsets == [0, 1, 2, 5, 6], "the policy's slots, in order"
    assert len(smtp.delivered) == 5, "exactly one mail per sent outcome"
    assert {d.rcpt_tos for d in smtp.delivered} == {("Ada@example.com",)}
    assert all("ada" not in str(o["recipient"]).lower() for o in outcomes)
    assert "ada@example.com" not in worker.log().lower(), "no address in the worker's log"


def test_recipients_do_not_interfere(
    burst_stack: tuple[Celery, CeleryWorker, SmtpTestServer],
) -> None:
    """Two mails each to three recipients: each recipient's first goes at once."""
    app, _, smtp = burst_stack
    results = [
        app.send_task(TASK, args=[f"user{n}@example.com"], kwargs={"subject": "s", "body": "b"})
        for n in range(3)
        for _ in range(2)
    ]
    outcomes = wait_all(results, timeout=15)
    assert [o["status"] for o in outcomes] == ["sent"] * 6
    assert sorted(o["deferrals"] for o in outcomes) == [0, 0, 0, 1, 1, 1]
    assert len(smtp.delivered) == 6


def test_transient_smtp_errors_are_retried_to_exactly_one_mail(
    burst_stack: tuple[Celery, CeleryWorker, SmtpTestServer],
) -> None:
    """451 twice then 250: the mail arrives exactly once; a 451 at RCPT is retried too."""
    app, _, smtp = burst_stack
    smtp.fail_data("451 4.3.0 try later", times=2)
    first = app.send_task(TASK, args=["a@example.com"], kwargs={"subject": "s", "body": "b"})
    outcome = first.get(timeout=20)
    assert outcome["status"] == "sent" and outcome["attempts"] == 3
    smtp.fail_rcpt("451 4.3.0 mailbox busy", times=1)
    second = app.send_task(TASK, args=["b@example.com"], kwargs={"subject": "s", "body": "b"})
    assert second.get(timeout=20)["status"] == "sent"
    assert len(smtp.delivered) == 2


def test_permanent_smtp_error_fails_once_and_releases_the_slot(
    burst_stack: tuple[Celery, CeleryWorker, SmtpTestServer],
) -> None:
    """550: FAILURE at once, no retry, and the recipient's slot is given back."""
    app, _, smtp = burst_stack
    smtp.refuse_data("550 5.7.1 no")
    failed = app.send_task(TASK, args=["c@example.com"], kwargs={"subject": "s", "body": "b"})
    with pytest.raises(Exception, match="smtp_permanent") as raised:
        failed.get(timeout=20)
    assert type(raised.value).__name__ == "MailFailed"
    assert failed.state == "FAILURE"
    outcome = raised.value.args[0]
    assert outcome["attempts"] == 1 and outcome["smtp_code"] == 550
    smtp.handler.permanent_data_reply = None  # accept again
    again = app.send_task(TASK, args=["c@example.com"], kwargs={"subject": "s", "body": "b"})
    assert again.get(timeout=20)["deferrals"] == 0, "the failed mail's slot was released"


def test_invalid_input_is_dropped_never_retried(
    burst_stack: tuple[Celery, CeleryWorker, SmtpTestServer],
) -> None:
    """A bad address, a header injection, a missing template variable: DROPPED(invalid)."""
    app, _, smtp = burst_stack
    calls = [
        (["not-an-address"], {"subject": "s", "body": "b"}),
        (["a@example.com"], {"subject": "s\r\nBcc: x@example.com", "body": "b"}),
        (["a@example.com"], {"kind": "code", "context": {}}),
        (["a@example.com"], {"kind": "no-such-kind"}),
    ]
    results = [app.send_task(TASK, args=a, kwargs=k) for a, k in calls]
    outcomes = wait_all(results, timeout=15)
    assert [(o["status"], o["reason"]) for o in outcomes] == [("dropped", "invalid")] * 4
    assert smtp.delivered == []


def test_same_mail_id_sends_once(burst_stack: tuple[Celery, CeleryWorker, SmtpTestServer]) -> None:
    """Two calls with one mail id: one mail; the second returns the first's outcome."""
    app, _, smtp = burst_stack
    kwargs = {"subject": "s", "body": "b", "mail_id": "order-42-confirmation"}
    first = app.send_task(TASK, args=["d@example.com"], kwargs=kwargs).get(timeout=15)
    second = app.send_task(TASK, args=["d@example.com"], kwargs=kwargs).get(timeout=15)
    assert first["status"] == second["status"] == "sent"
    assert second["sent_at"] == first["sent_at"]
    assert len(smtp.delivered) == 1


def test_prefork_with_memory_limiter_refuses_to_start(own_redis: RedisServer) -> None:
    """A prefork pool of 2 with a memory:// limiter does not start: it could not limit."""
    env = worker_env(own_redis.url, "console://", MAILGUARD_LIMITER_URL="memory://")
    with pytest.raises(RuntimeError, match="prefork pool of 2"):
        CeleryWorker(env).start(timeout=20)


def test_a_copy_that_finds_its_mail_in_flight_leaves_the_stored_outcome_alone(
    burst_stack: tuple[Celery, CeleryWorker, SmtpTestServer],
) -> None:
    """A copy run while another run holds the mail's claim (a watchdog's or a redelivered copy
    beside the run that sends) waits, and stores no DEFERRED over the outcome the other run
    stored under the same task id: the state a caller reads stays that run's. (Celery itself
    keeps a SUCCESS from being overwritten, not a FAILURE: the mail here failed.)"""
    app, worker, smtp = burst_stack
    settings = Settings.from_env(worker.env)
    ledger = build_ledger(settings)
    mail_id = "in-flight-copy-1"
    assert ledger.begin(mail_id, "the-run-that-sends", 30) is True
    with warnings.catch_warnings():  # Celery's Redis backend calls redis-py's deprecated setex
        warnings.simplefilter("ignore", DeprecationWarning)
        app.backend.store_result(mail_id, RuntimeError("550 5.1.1 user unknown"), "FAILURE")
    copy = app.send_task(
        TASK, args=["ada@example.com"], kwargs={"mail_id": mail_id}, task_id=mail_id
    )
    # Its second look (IN_FLIGHT_WAIT later) proves the first run of the copy has ended.
    poll(lambda: worker.log().count("being sent by another run") >= 2, 20, "two looks")
    assert copy.state == "FAILURE", (copy.state, copy.info)
    assert smtp.delivered == []
