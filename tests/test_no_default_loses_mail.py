"""No default loses mail: with no configuration, ``send_mail.delay`` refuses rather than enqueue
on an in-process broker nobody reads; the shared task's queue is consumed by any app's worker;
parked mails stay with the app and queue that parked them.

Each case runs in a subprocess with a clean environment (no ``MAILGUARD_*`` of the suite's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from tests.smtp_server import SmtpTestServer
from workers import app as mailguard_app
from workers.tasks import send_mail

ROOT = Path(__file__).resolve().parent.parent

#: The refusal's start, as the caller sees it.
REFUSAL = "mailguard: MAILGUARD_BROKER_URL is memory://, a broker inside this process that no"


def run_clean(script: str, **extra: str) -> Any:
    """Run ``script`` with no ``MAILGUARD_*`` variable (plus ``extra``); its last line, as JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
    env |= {"PYTHONPATH": str(ROOT), **extra}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


REFUSED = """
import json
from workers.tasks import send_mail
seen = []
for call in (
    lambda: send_mail.delay("ada@example.com", subject="s", body="b"),
    lambda: send_mail.apply_async(args=["ada@example.com"], kwargs={"subject": "s", "body": "b"}),
):
    try:
        call()
    except Exception as exc:
        seen.append([type(exc).__name__, str(exc)])
    else:
        seen.append(None)
print(json.dumps(seen))
"""


def test_delay_with_no_configuration_refuses_in_one_line_naming_the_broker() -> None:
    """``delay`` and ``apply_async`` on the embedded ``memory://`` broker, with no worker in
    the process, raise :class:`~workers.call.NoConsumer`: one line naming
    ``MAILGUARD_BROKER_URL``, nothing enqueued."""
    seen = run_clean(REFUSED)
    assert len(seen) == 2
    for refusal in seen:
        assert refusal is not None, "enqueued on a broker nobody reads"
        name, message = refusal
        assert name == "NoConsumer"
        assert message.startswith(REFUSAL), message
        assert "\n" not in message


DJANGO = """
import json
import django
from django.conf import settings
settings.configure(EMAIL_BACKEND="workers.django.EmailBackend")
django.setup()
from django.core.mail import send_mail
seen = []
for silently in (False, True):
    try:
        sent = send_mail("s", "b", "shop@example.org", ["ada@example.com"], fail_silently=silently)
    except Exception as exc:
        seen.append([type(exc).__name__, str(exc)])
    else:
        seen.append(sent)
print(json.dumps(seen))
"""


def test_djangos_send_mail_with_no_configuration_refuses_even_when_silent() -> None:
    """Django's ``send_mail`` through the backend raises the same line, ``fail_silently`` or
    not (it would otherwise return 1, or 0, and lose every mail)."""
    seen = run_clean(DJANGO)
    assert [s[0] if isinstance(s, list) else s for s in seen] == ["NoConsumer", "NoConsumer"]
    assert all(s[1].startswith(REFUSAL) for s in seen), seen


IN_PROCESS = """
import json
from workers.app import app
from workers.tasks import send_mail
from workers.inprocess import inprocess_worker
with inprocess_worker(app):
    outcome = send_mail.delay("ada@example.com", subject="s", body="b").get(timeout=20)
try:
    send_mail.delay("ada@example.com", subject="s", body="b")
    after = None
except Exception as exc:
    after = str(exc)
print(json.dumps([outcome["status"], after]))
"""


@pytest.mark.server  # an in-process Celery worker, in a subprocess
def test_an_in_process_worker_consumes_the_memory_broker() -> None:
    """While an in-process worker runs, ``delay`` on ``memory://`` is accepted and the mail is
    sent; once it stopped, ``delay`` refuses again."""
    status, after = run_clean(IN_PROCESS, MAILGUARD_SMTP_URL="memory://")
    assert status == "sent"
    assert after is not None and after.startswith(REFUSAL), after


def test_two_apps_on_one_redis_each_keep_their_parked_mails(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """A project's own app and mailguard's app share the ledger's Redis and the queue name
    ``mail`` but not a broker: each app's worker promotes only the mails its app parked (each
    mail's result is in its own app's backend, none in the other's), and every mail is sent."""
    base = redis_url.rsplit("/", 1)[0]
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="1/2s",
        MAILGUARD_PARK_AFTER="1s",
        PROJECT_BROKER_URL=f"{base}/4",
        PROJECT_RESULT_BACKEND=f"{base}/5",
    )
    project = Celery(
        "project",
        broker=env["PROJECT_BROKER_URL"],
        backend=env["PROJECT_RESULT_BACKEND"],
        set_as_current=False,
    )
    ours = client_app(env)
    workers = [
        CeleryWorker(env, app_module="tests.project_app", name="project").start(),
        CeleryWorker(env, name="mailguard").start(),
    ]
    results: dict[str, list[Any]] = {}
    project.set_current()
    try:
        results["project"] = [
            send_mail.delay("ada@example.com", subject=f"project {n}", body="x") for n in range(3)
        ]
        ours_send = ours.tasks[send_mail.name]
        results["mailguard"] = [
            ours_send.delay("bob@example.com", subject=f"mailguard {n}", body="x") for n in range(3)
        ]
        outcomes = {app: [r.get(timeout=30) for r in rs] for app, rs in results.items()}
    finally:
        mailguard_app.app.set_current()
        for worker in workers:
            worker.stop()
        project.close()
        ours.close()
    for app, got in outcomes.items():
        assert [o["status"] for o in got] == ["sent"] * 3, (app, got)
        assert sorted(o["deferrals"] for o in got)[-1] >= 1, f"{app}: none waited"
    assert all("parked until" in w.log() for w in workers), "each app parked a mail"
    backends = {
        "project": redis.Redis.from_url(env["PROJECT_RESULT_BACKEND"]),
        "mailguard": redis.Redis.from_url(env["MAILGUARD_RESULT_BACKEND"]),
    }
    try:
        for app, rs in results.items():
            other = backends["mailguard" if app == "project" else "project"]
            ran_there = [r.id for r in rs if other.exists(f"celery-task-meta-{r.id}")]
            assert ran_there == [], f"{app}'s mails ran on the other app's worker"
    finally:
        for client in backends.values():
            client.close()
