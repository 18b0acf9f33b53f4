"""``workers.tasks.cancel`` from Python with a real worker, Redis and SMTP: a mail deferred as a
countdown is cancelled by its task id (the same code as ``mailguard cancel``), is never sent,
gives its slot back when its run comes, and cannot be cancelled twice; an unknown id is refused
in one line."""

from __future__ import annotations

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from mailer import Limiter, Policy
from mailer.settings import Settings
from mailer.steps import DEFERRED
from tests.waiting import poll
from workers import tasks

pytestmark = [
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.timeout(120),
    # Celery's Redis result backend, storing a state from this process, calls redis-py's setex
    pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning"),
]


def test_cancel_a_countdown_mail_from_python(redis_url: str, smtp_server: SmtpTestServer) -> None:
    """Two mails to one address under ``1/4s``: the second waits 4 s as a countdown (DEFERRED,
    not parked: ``PARK_AFTER`` is 10 s). ``cancel(task id)`` ends it dropped / cancelled; its run
    sends nothing; a second ``cancel`` and an unknown id raise ``NotCancelled``."""
    env = worker_env(
        redis_url, smtp_server.url, MAILGUARD_POLICY="1/4s, 50/1h", MAILGUARD_PARK_AFTER="10s"
    )
    previous = tasks.use_settings(Settings.from_env(env))
    app = client_app(env)
    worker = CeleryWorker(env).start()
    limiter = Limiter.from_url(
        env["MAILGUARD_LIMITER_URL"],
        Policy.parse("1/4s, 50/1h", name="recipient"),
        secret=env["MAILGUARD_SECRET"],
    )
    try:
        send_mail = app.tasks[tasks.send_mail.name]
        first = send_mail.apply_async(
            args=["ada@example.com"], kwargs={"subject": "1", "body": "b"}
        )
        assert first.get(timeout=30)["status"] == "sent"
        second = send_mail.apply_async(
            args=["ada@example.com"], kwargs={"subject": "2", "body": "b"}
        )
        poll(lambda: second.state == DEFERRED, 10, "the second mail to be deferred")
        outcome = tasks.cancel(second.id, app=app)
        assert (outcome.status, outcome.reason, outcome.mail_id) == (
            "dropped",
            "cancelled",
            second.id,
        )
        assert outcome.recipient is not None and "ada" not in outcome.recipient
        poll(lambda: second.state == "SUCCESS", 10, "the cancelled state")
        assert second.result["reason"] == "cancelled"
        with pytest.raises(tasks.NotCancelled, match="not waiting"):
            tasks.cancel(second.id, app=app)
        with pytest.raises(
            tasks.NotCancelled, match=r"'no-such-mail' is not waiting \(state PENDING"
        ):
            tasks.cancel("no-such-mail", app=app)
        # Its run, at its slot, finds it cancelled and gives the slot back: only the first
        # mail stays in the hour's budget.
        poll(lambda: limiter.peek("ada@example.com").remaining[1] == 49, 10, "the slot back")
    finally:
        worker.stop()
        app.close()
        limiter.close()
        tasks.use_settings(previous)
    assert [d.message["Subject"] for d in smtp_server.delivered] == ["1"], "the second never sent"
