"""No false alarm of a lost first message: a mail received (or sent) is never reported lost by
the watchdog. Real redis-servers, real prefork workers, a real SMTP server.

Each scenario ends when every mail is sent and the outbox is empty (from then on no look of any
watchdog can find anything to publish again), then counts the watchdog's "popped from the
broker and never received" lines in every worker's log and ``mailguard_outbox_republished_total``
on its metrics endpoint: zero, since no message was removed from the broker. (The tests where a
first message really is lost and is published again:
``tests/workers/celery/test_outbox_worker.py``.)
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.ports import free_port
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from mailer.records.outbox import RedisOutbox
from mailer.settings import Settings
from tests.waiting import poll
from workers import tasks
from workers.outbox import entries as outbox
from workers.outbox import ride as outbox_ride
from workers.waiting.parking import schedule_for

ALARM = "its first message was popped from the broker and never received"
AOF = ("--appendonly", "yes", "--appendfsync", "always")

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(150)]


@pytest.fixture
def fresh() -> Iterator[RedisServer]:
    """A Redis of this test's own, append-only (a restart keeps the outbox), no script loaded."""
    server = RedisServer(extra_args=AOF).start()
    yield server
    server.cleanup()


@pytest.fixture
def in_force() -> Iterator[list[Any]]:
    """Restores the settings in force and forgets this process's outbox writes afterwards."""
    previous = tasks.settings
    yield []
    tasks.use_settings(previous)
    outbox.close_writers()
    outbox._down_until.update(record=0.0, received=0.0)


def _use(env: dict[str, str]) -> Any:
    """Put ``env`` in force in this process (it enqueues as a web process would); its app."""
    tasks.use_settings(Settings.from_env(env))
    outbox.close_writers()
    return client_app(env)


def _send(app: Any, mail_id: str, to: str | None = None) -> Any:
    send_mail = app.tasks[tasks.send_mail.name]
    return send_mail.delay(
        to or f"{mail_id}@example.com", subject=mail_id, body="x", mail_id=mail_id
    )


def _outbox_size() -> int:
    box = outbox.outbox_for(tasks.settings)
    assert isinstance(box, RedisOutbox)
    box.settle()
    return box.size()


def _republished(port: int) -> float:
    """``mailguard_outbox_republished_total`` on a worker's metrics endpoint (0: never counted)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        families = text_string_to_metric_families(reply.read().decode())
        samples = [s for f in families for s in f.samples]
    return sum(s.value for s in samples if s.name == "mailguard_outbox_republished_total")


def _all_sent_and_cleared(results: list[Any], timeout: float = 60) -> None:
    try:
        poll(lambda: all(r.ready() for r in results), timeout, "every mail to be sent")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {[(r.id, r.state) for r in results]}") from exc
    for result in results:
        assert result.get(timeout=1)["status"] == "sent"
    poll(lambda: _outbox_size() == 0, 20, "every outbox entry to be cleared")


def _env(redis_url: str, smtp: SmtpTestServer, **extra: str) -> dict[str, str]:
    return worker_env(
        redis_url,
        smtp.url,
        **{"MAILGUARD_POLICY": "100/1s", "MAILGUARD_OUTBOX_GRACE": "1s"} | extra,
    )


def test_the_first_mails_on_a_fresh_redis_raise_no_alarm(
    fresh: RedisServer, smtp_server: SmtpTestServer, in_force: list[Any]
) -> None:
    """Given a fresh Redis as broker, ledger and results (no script loaded: the first put that
    rides in the publish is refused and written after it) and a worker waiting, when mails are
    enqueued one by one as the README walks them, then each is sent, no entry stays behind, and
    no alarm is raised or counted."""
    port = free_port()
    env = _env(fresh.url, smtp_server, MAILGUARD_METRICS_PORT=f"127.0.0.1:{port}")
    worker = CeleryWorker(env).start()
    app = _use(env)
    try:
        results = [_send(app, f"walk-{n}") for n in range(4)]
        _all_sent_and_cleared(results)
        republished = _republished(port)
        log = worker.log()
    finally:
        worker.stop()
        app.close()
    assert log.count(ALARM) == 0, log[-3000:]
    assert republished == 0


def test_a_put_written_after_its_mail_was_sent_raises_no_alarm(
    fresh: RedisServer, smtp_server: SmtpTestServer, in_force: list[Any], monkeypatch: Any
) -> None:
    """Given puts that ride in the publish refused for want of their script (as on a fresh
    server: the script's id is spoilt here, so every put is refused) and written by the
    producer only after the worker received and sent the mail (the producer waits for the
    worker's "succeeded" line), then no entry stays behind and no alarm is raised or counted:
    the receipt that found no entry is remembered and the late put writes nothing."""
    port = free_port()
    env = _env(fresh.url, smtp_server, MAILGUARD_METRICS_PORT=f"127.0.0.1:{port}")
    worker = CeleryWorker(env).start()
    app = _use(env)
    real_ride, real_published = outbox_ride.ride_for, outbox.published

    def refused(command: tuple[Any, ...], settings: dict[str, Any]) -> outbox_ride.Ride:
        return real_ride((command[0], "0" * 40, *command[2:]), settings)

    def after_the_send(recorded: Any) -> None:
        done = f"Task mailguard.send_mail[{recorded.mail_id}] succeeded"
        poll(lambda: done in worker.log(), 30, f"{recorded.mail_id} to be sent first")
        assert recorded.ride is not None and recorded.ride.lost is not None
        real_published(recorded)

    monkeypatch.setattr(outbox_ride, "ride_for", refused)
    monkeypatch.setattr(outbox, "published", after_the_send)
    try:
        send_mail = app.tasks[tasks.send_mail.name]
        results = [
            send_mail.apply_async(
                args=[f"late-{n}@example.com"],
                kwargs={"subject": f"late-{n}", "body": "x", "mail_id": f"late-{n}"},
                task_id=f"late-{n}",
            )
            for n in range(3)
        ]
        assert _outbox_size() == 0, "a late put wrote an entry"
        _all_sent_and_cleared(results)
        republished = _republished(port)
        log = worker.log()
    finally:
        worker.stop()
        app.close()
    assert log.count(ALARM) == 0, log[-3000:]
    assert republished == 0


def test_a_ledger_restart_under_a_running_worker_raises_no_alarm(
    redis_url: str, fresh: RedisServer, smtp_server: SmtpTestServer, in_force: list[Any]
) -> None:
    """Given a running worker whose ledger's Redis (append-only) restarts, when six mails are
    enqueued right after it is back (the worker's receipts fail on its broken connection, then
    wait out the pause after a failure), then every receipt is made later: each mail is sent,
    the outbox ends empty, and no alarm is raised or counted."""
    port = free_port()
    env = _env(
        redis_url,
        smtp_server,
        MAILGUARD_LEDGER_URL=fresh.url,
        MAILGUARD_METRICS_PORT=f"127.0.0.1:{port}",
    )
    worker = CeleryWorker(env).start()
    app = _use(env)
    try:
        _all_sent_and_cleared([_send(app, "before-1")])
        fresh.restart()
        outbox.close_writers()  # this process's writes on a connection of the new server
        results = [_send(app, f"after-{n}") for n in range(6)]
        _all_sent_and_cleared(results)
        republished = _republished(port)
        log = worker.log()
    finally:
        worker.stop()
        app.close()
    assert log.count(ALARM) == 0, log[-3000:]
    assert republished == 0


def test_a_warm_restart_raises_no_alarm(
    fresh: RedisServer, smtp_server: SmtpTestServer, in_force: list[Any]
) -> None:
    """Given mails sent by one worker, more queued while it stops (warm) and another worker
    started, then every mail is sent once, the outbox ends empty, and neither worker raises an
    alarm."""
    env = _env(fresh.url, smtp_server)
    app = _use(env)
    first = CeleryWorker(env, name="w1").start()
    try:
        _all_sent_and_cleared([_send(app, f"one-{n}") for n in range(3)])
    finally:
        first.stop()
    queued = [_send(app, f"two-{n}") for n in range(3)]
    second = CeleryWorker(env, name="w2").start()
    try:
        _all_sent_and_cleared(queued)
        logs = first.log() + second.log()
    finally:
        second.stop()
        app.close()
    assert logs.count(ALARM) == 0, logs[-3000:]


def test_a_worker_killed_with_mails_deferred_raises_no_alarm(
    fresh: RedisServer, smtp_server: SmtpTestServer, in_force: list[Any]
) -> None:
    """Given three mails to one recipient under ``1/5s`` (one sent, two deferred: countdowns
    the worker holds; the kill well before the next slot, so no send is cut short), when the
    worker is SIGKILLed and another started, then every mail is sent
    once, the outbox ends empty, and no outbox alarm is raised (the countdowns are the
    schedule's to watch; their first messages were received)."""
    env = _env(fresh.url, smtp_server, MAILGUARD_POLICY="1/5s")
    app = _use(env)
    killed = CeleryWorker(env, name="w1").start()
    results = [_send(app, f"held-{n}", to="same@example.com") for n in range(3)]
    try:
        poll(lambda: len(smtp_server.delivered) >= 1, 30, "the first mail to be sent")
        poll(lambda: _outbox_size() == 0, 20, "every first message to be received")
        # Killed once both later mails are deferred (their runs ended, the schedule watching
        # their countdowns), not merely received: a received mail whose run has not started
        # is the visibility timeout's to bring back, not the schedule's.
        # The DEFERRED state is stored before the schedule's watch is written: both awaited.
        deferred = lambda: sum(r.state == "DEFERRED" for r in results) >= 2  # noqa: E731
        poll(deferred, 20, "two mails to be deferred")
        schedule = schedule_for(tasks.settings)
        poll(lambda: schedule.stats().watched >= 2, 20, "the schedule watching both countdowns")
    finally:
        killed.kill()
    second = CeleryWorker(env, name="w2").start()
    try:
        _all_sent_and_cleared(results, timeout=90)
        logs = killed.log() + second.log()
    finally:
        second.stop()
        app.close()
    assert logs.count(ALARM) == 0, logs[-3000:]
    ids = [d.message["Subject"] for d in smtp_server.delivered]
    assert sorted(ids) == [f"held-{n}" for n in range(3)], ids
