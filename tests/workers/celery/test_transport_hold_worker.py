"""A wrong password on real workers: the transport is held, no mail fails, one ERROR line;
the password fixed and the workers restarted, every kept mail is delivered once.

A real Celery worker, Redis and an aiosmtpd server that demands AUTH with one password; the
probe backoff is shortened by ``MAILGUARD_THROTTLE_HOLD_MAX=2s`` (the promise is the same at
1 min to 15 min)."""

from __future__ import annotations

import pytest
from celery.result import AsyncResult

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll
from tests.workers.cli.test_cli import run
from workers import tasks

pytestmark = [pytest.mark.redis, pytest.mark.slow]

USER, RIGHT, WRONG = "app", "right-secret", "wrong-secret"
MAILS = 4


def _send(app: object, n: int) -> AsyncResult:
    send_mail = app.tasks[tasks.send_mail.name]  # type: ignore[attr-defined]
    return send_mail.apply_async(  # type: ignore[no-any-return]
        args=[f"user{n}@example.com"], kwargs={"subject": f"n{n}", "body": "b"}
    )


@pytest.mark.timeout(180)
def test_a_wrong_password_holds_the_transport_and_a_restart_with_the_right_one_delivers_all(
    redis_url: str,
) -> None:
    """Given a relay that demands AUTH: with a wrong password every mail is deferred / held
    (hold transport), none fails, the worker logs one ERROR line, ``mailguard health`` exits 1
    naming the refusal and ``transport status`` shows it; the worker restarted with the right
    password delivers every mail exactly once and the hold is lifted."""
    with SmtpTestServer(credentials=(USER, RIGHT)) as smtp:
        port = smtp.port
        wrong = worker_env(
            redis_url,
            f"smtp://{USER}:{WRONG}@127.0.0.1:{port}",
            MAILGUARD_POLICY="recipient: 10/1s",
            MAILGUARD_THROTTLE_HOLD="1s",
            MAILGUARD_THROTTLE_HOLD_MAX="2s",
        )
        app = client_app(wrong)
        worker = CeleryWorker(wrong, name="wrongpw").start()
        try:
            results = [_send(app, n) for n in range(MAILS)]
            poll(lambda: all(r.state == "DEFERRED" for r in results), 30, "every mail held")
            infos = [dict(r.info) for r in results]
            assert {info["hold"] for info in infos} == {"transport"}, infos
            assert {info["smtp_code"] for info in infos} == {535}, infos
            poll(lambda: len(smtp.handler.logins) >= MAILS + 1, 30, "a probe after the hold")
            assert not any(r.state == "FAILURE" for r in results)
            health = run(["health"], wrong)
            assert health.returncode == 1, health.stdout
            assert "transport is held" in health.stderr and "535" in health.stderr
            shown = run(["transport", "status"], wrong)
            assert shown.returncode == 0 and "transport held since" in shown.stdout, shown
            assert WRONG not in shown.stdout and WRONG not in health.stderr
        finally:
            worker.stop()
        log = worker.log()
        errors = [line for line in log.splitlines() if "ERROR" in line]
        assert len([e for e in errors if "transport held" in e]) == 1, errors
        assert len(errors) == 1, errors
        assert WRONG not in log, "no password in the logs"
        assert not smtp.delivered, "nothing delivered with the wrong password"

        right = wrong | {"MAILGUARD_SMTP_URL": f"smtp://{USER}:{RIGHT}@127.0.0.1:{port}"}
        worker = CeleryWorker(right, name="rightpw").start()
        try:
            poll(lambda: all(r.state == "SUCCESS" for r in results), 60, "every mail sent")
        finally:
            worker.stop()
        assert "transport hold lifted" in worker.log()
        delivered = sorted(rcpt for d in smtp.delivered for rcpt in d.rcpt_tos)
        assert delivered == sorted(f"user{n}@example.com" for n in range(MAILS)), delivered
        shown = run(["transport", "status"], right)
        assert shown.returncode == 0 and "transport not held" in shown.stdout, shown
        app.close()
