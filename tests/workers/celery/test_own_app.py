"""``send_mail`` on a project's own Celery app: a shared task that goes through that app.

The worker is ``celery -A tests.workers.celery.project_app worker`` without ``-Q`` (the
project's app, its own broker and result backend, its default queue ``celery``, ``workers.tasks``
included); the mail is enqueued with ``send_mail.delay`` while the project's app is the current
one, and goes to ``MAILGUARD_QUEUE`` (``mail``), which that worker consumes as well. mailguard's
own broker (``MAILGUARD_BROKER_URL``) is another database that nothing must reach.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import redis
from celery import Celery

from devservers.celery_worker import ROOT, CeleryWorker, worker_env
from devservers.smtp_server import SmtpTestServer
from mailer.records.schedule import RedisSchedule
from tests.waiting import poll
from tests.workers.cli.test_cli import run
from workers import app as mailguard_app
from workers.tasks import send_mail


def test_a_projects_own_app_runs_send_mail(redis_url: str, smtp_server: SmtpTestServer) -> None:
    """Mails enqueued through the project's app are run by the project's worker, guarded
    (of two mails to one address under ``1/1s`` one is booked, then sent); mailguard's own
    broker holds no queue (the outbox lives in its database)."""
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
    worker = CeleryWorker(env, app_module="tests.workers.celery.project_app").start()
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
    # The outbox lives there (MAILGUARD_BROKER_URL's database on the ledger's server): no queue.
    queues = list(mailguard_broker.scan_iter(_type="list"))
    assert queues == [], "nothing went through mailguard's own broker"
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
    worker = CeleryWorker(env, app_module="tests.workers.celery.project_app").start()
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
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "tests.workers.celery.project_app",
        "worker",
        "-Q",
        "celery",
    ]
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


def _project_env(redis_url: str, smtp_url: str, **extra: str) -> dict[str, str]:
    """A project's worker whose ``MAILGUARD_BROKER_URL`` is not its app's broker (db 1 against
    the project's db 4): what a new user's first try looks like."""
    base = redis_url.rsplit("/", 1)[0]
    return worker_env(
        redis_url,
        smtp_url,
        PROJECT_BROKER_URL=f"{base}/4",
        PROJECT_RESULT_BACKEND=f"{base}/5",
        **extra,
    )


def _project(env: dict[str, str]) -> Celery:
    return Celery(
        "project",
        broker=env["PROJECT_BROKER_URL"],
        backend=env["PROJECT_RESULT_BACKEND"],
        set_as_current=False,
    )


def test_a_mail_parked_by_a_projects_worker_is_seen_and_cancelled_from_the_cli(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """Given a project's worker whose ``MAILGUARD_BROKER_URL`` names another broker, a mail it
    parks is in the queue's one schedule: ``mailguard scheduled`` counts it and ``mailguard
    cancel`` takes it out (it is never published)."""
    env = _project_env(
        redis_url, smtp_server.url, MAILGUARD_POLICY="1/60s", MAILGUARD_PARK_AFTER="1s"
    )
    project = _project(env)
    worker = CeleryWorker(env, app_module="tests.workers.celery.project_app").start()
    schedule = RedisSchedule(redis.Redis.from_url(env["MAILGUARD_LIMITER_URL"]), redis_url)
    project.set_current()
    try:
        for subject in ("one", "two"):  # either may be the one booked (two pool processes)
            send_mail.delay("ada@example.com", subject=subject, body="x")
        poll(lambda: schedule.stats().parked == 1, 20, "a mail to be parked")
        shown = run(["scheduled", "--json"], env)
        assert shown.returncode == 0 and json.loads(shown.stdout)["parked"] == 1, shown.stderr
        (mail_id, _, _), *_ = schedule.scan()
        done = run(["cancel", mail_id, "--yes"], env)
        assert done.returncode == 0, done.stderr
        assert (schedule.stats().parked, schedule.stats().watched) == (0, 0)
    finally:
        mailguard_app.app.set_current()
        worker.stop()
        project.close()
        schedule.client.close()


def test_a_worker_beside_one_of_its_queue_on_another_broker_refuses_to_start(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """Given mailguard's worker running on broker db 1, a project's worker of the same queue
    and ledger on db 4 exits 1 with one line naming ``MAILGUARD_QUEUE``; a second worker on
    db 1 spelled ``localhost`` instead of ``127.0.0.1`` starts."""
    env = _project_env(redis_url, smtp_server.url)
    running = CeleryWorker(env, name="first").start()
    other: CeleryWorker | None = None
    try:
        base = {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.workers.celery.project_app",
            "worker",
        ]
        done = subprocess.run(
            [*command, "--pool", "solo", "--without-gossip", "--without-mingle", "-n", "second@%h"],
            env=base | env | {"PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 1, done.stderr[-3000:]
        lines = [x for x in done.stderr.splitlines() if x.startswith("mailguard: this worker")]
        port = redis_url.rsplit(":", 1)[1].split("/", maxsplit=1)[0]
        assert lines and lines[0].startswith(
            f"mailguard: this worker consumes from redis://localhost:{port}/4 but worker first@"
        ), done.stderr[-3000:]
        assert f"consumes from redis://localhost:{port}/1" in lines[0]
        assert "MAILGUARD_QUEUE 'mail'" in lines[0]
        respelled = env["MAILGUARD_BROKER_URL"].replace("127.0.0.1", "localhost")
        assert respelled != env["MAILGUARD_BROKER_URL"]
        other = CeleryWorker(env | {"MAILGUARD_BROKER_URL": respelled}, name="third").start()
    finally:
        running.stop()
        if other is not None:
            other.stop()
