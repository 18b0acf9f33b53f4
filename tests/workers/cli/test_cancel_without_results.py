"""``mailguard outcome`` and ``mailguard cancel`` with no result backend set (the default
``cache+memory://``, which only its own process reads): they answer from the ledger and the
schedule the workers share, or say that ``MAILGUARD_RESULT_BACKEND`` is why they cannot tell.
A real worker, Redis and SMTP server."""

from __future__ import annotations

import json

import pytest
import redis

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from mailer.records.schedule import RedisSchedule
from tests.waiting import poll
from tests.workers.cli.test_cli import one_line_error, run

TASK = "mailguard.send_mail"

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]


def outcome_json(mail_id: str, env: dict[str, str]) -> dict[str, object]:
    done = run(["outcome", mail_id, "--json"], env)
    assert done.returncode == 0, done.stderr
    shown: dict[str, object] = json.loads(done.stdout)
    return shown


def test_outcome_and_cancel_read_the_ledger_and_schedule_without_a_result_backend(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """Given a worker with no result backend, three mails to one address under ``1/40s`` with
    ``PARK_AFTER`` 60 s, each with a mail id of its own: the first is sent, the second waits
    40 s as a countdown its worker holds (watched in the schedule), the third 80 s, parked
    (spacing wide enough that the command-line steps end before either comes due on a slow
    machine). Then ``outcome`` tells each by its mail id (sent; deferred, due at its slot),
    names ``MAILGUARD_RESULT_BACKEND`` for a task id it cannot map and for an unknown id;
    ``cancel`` by mail id cancels the parked one (it leaves the schedule) and the held one
    (its run will find it cancelled), and ``outcome`` then says dropped / cancelled."""
    env = worker_env(
        redis_url, smtp_server.url, MAILGUARD_POLICY="1/40s, 50/1h", MAILGUARD_PARK_AFTER="60s"
    )
    del env["MAILGUARD_RESULT_BACKEND"]
    app = client_app(env)
    worker = CeleryWorker(env).start()
    schedule_client = redis.Redis.from_url(env["MAILGUARD_LIMITER_URL"])
    schedule = RedisSchedule(schedule_client, env["MAILGUARD_LIMITER_URL"])
    ids = ["own-sent", "own-held", "own-parked"]
    try:
        tasks = []
        for mail_id in ids:
            kwargs = {"subject": "s", "body": "b", "mail_id": mail_id}
            tasks.append(app.send_task(TASK, args=["ada@example.com"], kwargs=kwargs))
            if mail_id == "own-sent":
                poll(lambda: len(smtp_server.delivered) == 1, 20, "the first mail to be sent")
        poll(
            lambda: (schedule.stats().parked, schedule.stats().watched) == (1, 1),
            20,
            "the second mail to be watched and the third parked",
        )
        sent = outcome_json("own-sent", env)
        assert sent["state"] == "SUCCESS"
        assert sent["outcome"]["status"] == "sent"  # type: ignore[index]
        for mail_id in ("own-held", "own-parked"):
            waiting = outcome_json(mail_id, env)
            assert waiting["state"] == "DEFERRED", waiting
            shown = waiting["outcome"]
            assert shown["status"] == "deferred" and shown["due"] > 0, shown  # type: ignore[index]
            assert "MAILGUARD_RESULT_BACKEND" in shown["detail"], shown  # type: ignore[index]
        table = run(["outcome", "own-parked"], env)
        assert table.returncode == 0 and "DEFERRED" in table.stdout, table.stderr
        assert "ada@" not in table.stdout
        for unknown in (tasks[2].id, "nobody-sent-this"):
            done = run(["outcome", unknown], env)
            assert done.returncode == 1
            assert "MAILGUARD_RESULT_BACKEND" in one_line_error(done.stderr)
        done = run(["cancel", tasks[2].id, "--yes"], env)
        assert done.returncode == 1 and "MAILGUARD_RESULT_BACKEND" in one_line_error(done.stderr)
        done = run(["cancel", "own-parked", "--yes"], env)
        assert done.returncode == 0, done.stderr
        assert "cancelled own-parked (parked; slot freed)" in done.stdout
        assert schedule.stats().parked == 0
        done = run(["cancel", "own-held", "--yes"], env)
        assert done.returncode == 0, done.stderr
        for mail_id in ("own-held", "own-parked"):
            cancelled = outcome_json(mail_id, env)
            assert cancelled["state"] == "SUCCESS", cancelled
            shown = cancelled["outcome"]
            assert (shown["status"], shown["reason"]) == ("dropped", "cancelled")  # type: ignore[index]
        again = run(["cancel", "own-parked", "--yes"], env)
        error = one_line_error(again.stderr)
        assert again.returncode == 1 and "(state SUCCESS): already dropped" in error
    finally:
        worker.stop()
        app.close()
        schedule_client.close()
    assert len(smtp_server.delivered) == 1, "only the first mail was sent"
