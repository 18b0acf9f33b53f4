"""``send_mail`` on a project's own Celery app: a shared task that goes through that app.

The worker is ``celery -A tests.project_app worker`` without ``-Q`` (the project's app, its own
broker and result backend, its default queue ``celery``, ``workers.tasks`` included); the mail
is enqueued with ``send_mail.delay`` while the project's app is the current one, and goes to
``MAILGUARD_QUEUE`` (``mail``), which that worker consumes as well. mailguard's own broker
(``MAILGUARD_BROKER_URL``) is another database that nothing must reach.
"""

from __future__ import annotations

import os
import subprocess
import sys

import redis
from celery import Celery

from devservers.celery_worker import ROOT, CeleryWorker, worker_env
from tests.smtp_server import SmtpTestServer
from tests.waiting import poll
from workers import app as mailguard_app
from workers.tasks import send_mail


def test_a_projects_own_app_runs_send_mail(redis_url: str, smtp_server: SmtpTestServer) -> None:
    """Mails enqueued through the project's app are run by the project's worker, guarded
    (of two mails to one address under ``1/1s`` one is booked, then sent); mailguard's own
    broker stays empty."""
    base = redis_url.rsplit("/", 1)[0]
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="1/1s",
        PROJECT_BROKER_URL=f"{base}/4",
        PROJECT_RESULT_BACKEND=f"{base}/5",
    )
    project = Celery(
        "project",
        broker=env["PROJECT_BROKER_URL"],
        backend=env["PROJECT_RESULT_BACKEND"],
        set_as_current=False,
    )
    worker = CeleryWorker(env, app_module="tests.project_app").start()
    project.set_current()
    try:
        assert send_mail.app is project
        first = send_mail.delay("ada@example.com", subject="one", body="x")
        second = send_mail.delay("ada@example.com", subject="two", body="x")
        outcomes = [first.get(timeout=20), second.get(timeout=20)]
    finally:
        mailguard_app.app.set_current()
        worker.stop()
        project.close()
    assert [o["status"] for o in outcomes] == ["sent", "sent"], outcomes
    assert sorted(o["deferrals"] for o in outcomes) == [0, 1], "one waited for its slot"
    assert sorted(d.message["Subject"] for d in smtp_server.delivered) == ["one", "two"]
    mailguard_broker = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
    assert mailguard_broker.dbsize() == 0, "nothing went through mailguard's own broker"
    mailguard_broker.close()


def test_a_mail_parked_through_a_projects_own_app_is_published_when_due(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """The project's worker runs the promoter too: of two mails to one address under ``1/3s``
    with ``PARK_AFTER`` 1 s, one is parked, then published and sent at its slot."""
    base = redis_url.rsplit("/", 1)[0]
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="1/3s",
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
    worker = CeleryWorker(env, app_module="tests.project_app").start()
    broker = redis.Redis.from_url(env["PROJECT_BROKER_URL"])
    project.set_current()
    try:
        first = send_mail.delay("ada@example.com", subject="one", body="x")
        second = send_mail.delay("ada@example.com", subject="two", body="x")
        # Either may be the one booked (two pool processes): the worker's log says which.
        poll(lambda: "parked until" in worker.log_path.read_text(), 20, "a mail to be parked")
        poll(lambda: broker.hlen("unacked") == 0, 5, "its run to end")
        held = broker.llen("mail")
        outcomes = [first.get(timeout=20), second.get(timeout=20)]
    finally:
        mailguard_app.app.set_current()
        worker.stop()
        project.close()
        broker.close()
    assert held == 0, "the booked mail was parked, not held by the project's broker"
    assert [o["status"] for o in outcomes] == ["sent", "sent"], outcomes
    gap = abs(outcomes[1]["sent_at"] - outcomes[0]["sent_at"])
    assert gap >= 3.0 - 0.05, f"sent {gap:.2f} s apart under 1/3s"


def test_a_projects_worker_whose_queues_leave_out_the_mail_queue_refuses_to_start(
    redis_url: str,
) -> None:
    """``-Q celery`` on a worker that runs ``send_mail``: one line naming the queue it must
    consume, exit 1, before it takes anything."""
    base = redis_url.rsplit("/", 1)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
    env |= worker_env(
        redis_url,
        "console://",
        PROJECT_BROKER_URL=f"{base}/4",
        PROJECT_RESULT_BACKEND=f"{base}/5",
    ) | {"PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "celery", "-A", "tests.project_app", "worker", "-Q", "celery"]
    done = subprocess.run(
        [*command, "--pool", "solo", "--without-gossip", "--without-mingle"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    line = (
        "mailguard: this worker does not consume the queue 'mail' (MAILGUARD_QUEUE) that "
        "send_mail is published to; add it: -Q celery,mail"
    )
    assert line in done.stderr.splitlines(), done.stderr[-3000:]
