"""A caller's ``eta`` / ``countdown`` with a real worker, Redis and SMTP: a short one is held by
the worker and the kind's tolerance counts from it; a long one is parked at enqueue (no worker
holds it), shown by ``mailguard outcome`` under its mail id, and cancelled from Python."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis

from devservers.smtp_server import SmtpTestServer
from mailer.records.schedule import RedisSchedule
from mailer.steps import DEFERRED
from tests.workers.cli.test_cli import run
from tests.workers.conftest import StackFactory
from workers import tasks
from workers.waiting.payload import Parked

pytestmark = [
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.timeout(120),
    # Celery's Redis result backend, storing a state from this process, calls redis-py's setex
    pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning"),
]

#: Seconds by which the SMTP server may see a mail before its eta (one clock, its granularity).
EARLY = 0.05


@pytest.fixture
def code_tolerant_stack(stack: StackFactory) -> tuple[Any, dict[str, str]]:
    """A worker whose ``code`` kind tolerates 5 s; this process enqueues with the same
    settings, as a web process with the workers' ``MAILGUARD_*`` does."""
    parts = stack(MAILGUARD_POLICY="100/1s", MAILGUARD_KIND_CODE_MAX_WAIT="5s", settings=True)
    return parts.app, parts.env


def test_a_code_mail_with_a_countdown_longer_than_its_tolerance_is_sent_at_its_eta(
    code_tolerant_stack: tuple[Any, dict[str, str]], smtp_server: SmtpTestServer
) -> None:
    """``countdown=8`` on a kind that tolerates 5 s: sent, never before +8 s, and within the
    tolerance counted from then (not dropped / expired)."""
    app, _ = code_tolerant_stack
    send_mail = app.tasks[tasks.send_mail.name]
    asked = time.time()
    call = {"kind": "code", "context": {"code": "493112"}}
    result = send_mail.apply_async(args=["ada@example.com"], kwargs=call, countdown=8)
    outcome = result.get(timeout=40)
    assert (outcome["status"], outcome["reason"]) == ("sent", None), outcome
    [got] = smtp_server.delivered
    assert got.received_at >= asked + 8 - EARLY, "sent before its countdown"
    assert outcome["sent_at"] <= asked + 8 + 5 + 1, "sent within its tolerance from the eta"
    assert got.message["Subject"] == "Your code"


def test_an_eta_a_day_ahead_is_parked_found_by_mail_id_and_cancelled(
    code_tolerant_stack: tuple[Any, dict[str, str]], smtp_server: SmtpTestServer
) -> None:
    """``eta`` a day ahead: parked at enqueue (in the schedule with that due time, DEFERRED,
    nothing on the broker for a worker to hold); ``mailguard outcome`` finds it by its own
    mail id; ``workers.tasks.cancel`` by that mail id ends it dropped / cancelled."""
    app, env = code_tolerant_stack
    send_mail = app.tasks[tasks.send_mail.name]
    eta = datetime.now(timezone.utc) + timedelta(days=1)
    result = send_mail.apply_async(
        args=["ada@example.com"],
        kwargs={"subject": "Tomorrow", "body": "b", "mail_id": "order-42"},
        eta=eta,
    )
    client = redis.Redis.from_url(env["MAILGUARD_LIMITER_URL"])
    broker = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
    try:
        schedule = RedisSchedule(client, env["MAILGUARD_LIMITER_URL"])
        entry = Parked.decode(schedule.payload("order-42"), "order-42")
        assert entry.task_id == result.id and entry.due == pytest.approx(eta.timestamp(), abs=0.01)
        assert result.state == DEFERRED
        assert broker.llen("mail") == 0 and not broker.hlen("unacked"), "no worker holds it"
        shown = run(["outcome", "order-42", "--json"], env)
        assert shown.returncode == 0, shown.stderr
        assert '"state": "DEFERRED"' in shown.stdout and '"due"' in shown.stdout
        outcome = tasks.cancel("order-42", app=app)
        assert (outcome.status, outcome.reason) == ("dropped", "cancelled")
        assert schedule.payload("order-42") is None
        assert result.state == "SUCCESS" and result.result["reason"] == "cancelled"
        with pytest.raises(tasks.NotCancelled, match=r"not waiting \(state SUCCESS\)"):
            tasks.cancel(result.id, app=app)
        final = run(["outcome", "order-42", "--json"], env)  # the ledger's, by mail id
        assert final.returncode == 0 and '"cancelled"' in final.stdout, final.stderr
    finally:
        client.close()
        broker.close()
    assert smtp_server.delivered == []
