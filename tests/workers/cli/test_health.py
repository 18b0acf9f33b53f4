"""Workers' liveness records and ``mailguard health``: the verdict on an injected clock, and a
real worker whose consumer is frozen (SIGSTOP) while a mail waits in its queue."""

from __future__ import annotations

import json
import os
import re
import signal

import celery
import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from mailer.settings import Settings
from tests.waiting import poll
from tests.workers.cli.test_cli import run
from tests.workers.conftest import StackFactory
from workers.cli.health import judge
from workers.process import settings as process_settings
from workers.process.liveness import GONE, WorkerRecord, broker_identity, conflict
from workers.tasks import send_mail

NOW = 1_000_000.0


def _record(
    name: str, *, consumed: float = 0.0, seen: float = NOW, broker: str = "b"
) -> WorkerRecord:
    return WorkerRecord(name, broker, started=NOW - 600, seen=seen, consumed=consumed)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("redis://localhost:6379/1", "redis://127.0.0.1/1"),
        ("redis://:secret@LOCALHOST:6379/0", "redis://[::1]:6379"),
        ("redis://broker.example:6379", "redis://broker.example:6379/0?ssl_cert_reqs=none"),
        ("amqp://guest:guest@localhost:5672//", "pyamqp://localhost/"),
    ],
)
def test_one_broker_spelled_two_ways_has_one_identity(one: str, other: str) -> None:
    """Host case, loopback names, default port, database 0 or none, a query and credentials do
    not make another broker; and no password is kept."""
    assert broker_identity(one) == broker_identity(other)
    assert "secret" not in broker_identity(one)


def test_another_database_or_host_is_another_broker() -> None:
    """Another Redis database, port or host is another broker."""
    names = [
        "redis://localhost/1",
        "redis://localhost/2",
        "redis://localhost:6380/1",
        "redis://a/1",
    ]
    assert len({broker_identity(n) for n in names}) == 4


def test_a_running_worker_on_another_broker_conflicts_a_gone_one_does_not() -> None:
    """Only a worker seen within GONE, of another hostname and broker, conflicts."""
    me = _record("me", broker="redis://localhost:6379/4")
    same = _record("same", broker="redis://localhost:6379/4")
    gone = _record("gone", broker="redis://localhost:6379/1", seen=NOW - GONE - 1)
    running = _record("running", broker="redis://localhost:6379/1")
    assert conflict([me, same, gone], me, NOW) is None
    assert conflict([me, same, gone, running], me, NOW) == running


def test_nothing_due_is_healthy_however_long_a_worker_was_silent() -> None:
    """An idle worker is not a hung one: with nothing due the verdict is healthy."""
    _, problem = judge([_record("w1")], due=False, now=NOW, bound=60, worker=None)
    assert problem == ""


def test_a_worker_silent_past_the_bound_while_mail_is_due_is_named() -> None:
    """Mail due: the worker that consumed 61 s ago (bound 60 s) is named, the one that
    consumed 1 s ago is fine."""
    records = [_record("w1", consumed=NOW - 61), _record("w2", consumed=NOW - 1)]
    verdicts, problem = judge(records, due=True, now=NOW, bound=60, worker=None)
    assert problem.startswith("w1: consumed nothing for over")
    assert [v.problem for v in verdicts] == ["silent while mail is due", ""]
    _, own = judge(records, due=True, now=NOW, bound=60, worker="w2")
    assert own == ""


def test_a_gone_worker_is_reported_not_failed_unless_none_runs() -> None:
    """A killed worker's stale record is shown as gone; the verdict fails only when no running
    worker is left while mail is due, or the one asked about has no record."""
    gone = _record("old", consumed=NOW - 999, seen=NOW - GONE - 1)
    fresh = _record("new", consumed=NOW - 1)
    verdicts, problem = judge([gone, fresh], due=True, now=NOW, bound=60, worker=None)
    assert (problem, verdicts[0].problem) == ("", "gone")
    _, alone = judge([gone], due=True, now=NOW, bound=60, worker=None)
    assert alone == "no running worker consumes the queue while mail is due (gone: old)"
    _, missing = judge([fresh], due=True, now=NOW, bound=60, worker="w9")
    assert missing.startswith("worker w9 has no liveness record")


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_health_names_a_frozen_worker_while_a_mail_waits(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """A worker that consumed a mail has a record saying when; ``mailguard health`` exits 0.
    Frozen (SIGSTOP) with a mail in its queue, it is named and the exit is 1; thawed, it
    consumes the mails and the exit is 0 again."""
    env = worker_env(redis_url, smtp_server.url, MAILGUARD_POLICY="10/1s")
    app = client_app(env)
    worker = CeleryWorker(env, name="probe").start()
    assert worker.process is not None
    try:
        app.send_task("mailguard.send_mail", args=["ada@example.com"], kwargs={"body": "1"})
        poll(lambda: len(smtp_server.delivered) == 1, 20, "the first mail")

        def consumed() -> float:
            done = run(["health", "--json"], env)
            assert done.returncode == 0, done.stderr
            return float(json.loads(done.stdout)["workers"][0]["consumed"])

        poll(lambda: consumed() > 0, 10, "the worker's consumption to be recorded")
        os.kill(worker.process.pid, signal.SIGSTOP)
        try:
            # The first may go to a BRPOP the frozen consumer sent before (if one was
            # outstanding when it froze); the second waits in the queue either way.
            for n in (2, 3):
                app.send_task("mailguard.send_mail", args=[f"u{n}@example.com"], kwargs={})
            poll(lambda: _queued(run(["health"], env).stdout) >= 1, 10, "a queued mail")
            frozen = run(["health", "--silent-for", "0s"], env)
            assert frozen.returncode == 1, frozen.stdout
            # named either way: silent while mail is due, or gone (frozen past GONE seconds of
            # its record, which a loaded machine's slow CLI runs can reach)
            assert "probe@" in frozen.stderr and "mail is due" in frozen.stderr, frozen.stderr
        finally:
            os.kill(worker.process.pid, signal.SIGCONT)
        poll(lambda: len(smtp_server.delivered) == 3, 20, "both mails after the thaw")
        poll(lambda: run(["health"], env).returncode == 0, 10, "a healthy verdict again")
    finally:
        worker.stop()
        app.close()


def _queued(report: str) -> int:
    """The ``queued N`` count of ``mailguard health``'s report (0 when absent)."""
    found = re.search(r"queued (\d+)", report)
    return int(found.group(1)) if found else 0


def _default_kind_mail(env: dict[str, str], to: str) -> None:
    """A mail of the default kind enqueued as a caller with ``env``'s settings does (priority
    5: kombu's list ``mail\\x06\\x164`` on Redis, not the ``mail`` list)."""
    app = client_app(env)
    previous = celery.current_app._get_current_object()
    old = process_settings.use_settings(Settings.from_env(env))
    app.set_current()
    try:
        send_mail.delay(to, subject="s", body="b")
    finally:
        previous.set_current()
        process_settings.use_settings(old)
        app.close()


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_health_fails_when_the_worker_is_killed_with_default_kind_mail_waiting(
    stack: StackFactory,
) -> None:
    """The worker killed (SIGKILL: its record stays) and a default-kind mail enqueued: once
    the record is gone, ``mailguard health`` counts the mail and exits 1 naming the cause."""
    s = stack()
    s.worker.kill()
    _default_kind_mail(s.env, "ada@example.com")
    poll(lambda: _gone(s.env), 3 * GONE, "the killed worker's record to be gone")
    done = run(["health"], s.env)
    assert _queued(done.stdout) == 1, done.stdout
    assert done.returncode == 1, done.stdout
    assert "no running worker consumes the queue while mail is due" in done.stderr, done.stderr


@pytest.mark.redis
@pytest.mark.timeout(60)
def test_health_fails_with_mail_waiting_and_no_worker_record(redis_url: str) -> None:
    """No worker ever ran: nothing due exits 0; a default-kind mail waiting exits 1."""
    env = worker_env(redis_url, "smtp://127.0.0.1:9")
    idle = run(["health"], env)
    assert (idle.returncode, _queued(idle.stdout)) == (0, 0), idle.stdout + idle.stderr
    _default_kind_mail(env, "ada@example.com")
    done = run(["health", "--json"], env)
    report = json.loads(done.stdout)
    assert (report["queued"], report["workers"]) == (1, []), done.stdout
    assert done.returncode == 1
    assert report["problem"] == "no running worker consumes the queue while mail is due"


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_health_fails_when_a_killed_worker_held_a_mail_for_its_slot(stack: StackFactory) -> None:
    """Under ``1/30s`` the second mail to one address waits in the worker for its slot
    (kombu's unacknowledged messages, not the queue). The worker killed, no other running:
    ``mailguard health`` counts it as held and exits 1."""
    s = stack(MAILGUARD_POLICY="1/30s")
    _default_kind_mail(s.env, "ada@example.com")
    poll(lambda: len(s.smtp.delivered) == 1, 20, "the first mail")
    _default_kind_mail(s.env, "ada@example.com")
    poll(lambda: json.loads(run(["health", "--json"], s.env).stdout)["held"] == 1, 20, "held")
    healthy = run(["health"], s.env)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "queued 0, held 1, schedule due no" in healthy.stdout, healthy.stdout
    s.worker.kill()
    poll(lambda: _gone(s.env), 3 * GONE, "the killed worker's record to be gone")
    done = run(["health"], s.env)
    assert done.returncode == 1, done.stdout
    assert "no running worker consumes the queue while mail is due" in done.stderr, done.stderr


def _gone(env: dict[str, str]) -> bool:
    """``mailguard health --json`` reports the one worker's record as gone."""
    report = json.loads(run(["health", "--json"], env).stdout)
    return bool(report["workers"]) and report["workers"][0]["problem"] == "gone"
