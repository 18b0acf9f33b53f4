"""A mail's first message lost between the broker's pop and the worker's receipt is sent once;
a backlog is never doubled. Real prefork workers, a real Redis broker and ledger, a real SMTP
server. The test pops the message from the broker's list itself and drops it: exactly what
kombu's Redis transport loses when a consumer dies between ``BRPOP`` and its unacked record.
Every test audits the SMTP server's log: one copy per Message-ID, none lost."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from mailer.factory import outbox_url
from mailer.mail.message import message_id
from mailer.records.outbox import RedisOutbox
from mailer.settings import Settings
from tests.waiting import poll
from workers import tasks
from workers.outbox import entries as outbox
from workers.polling.outbox_watch import POLL, SETTLE

SENDER = "mailguard@example.org"
GRACE = 1.0  # MAILGUARD_OUTBOX_GRACE in these tests, seconds
#: The promise, seconds after a worker is ready: the grace, two looks SETTLE apart, a poll
#: either side, and the 3 s every restart promise of the reliability guide allows.
ON_TIME = GRACE + SETTLE + 2 * POLL + 3.0

#: Above the sum of this file's bounds (a worker's start 40 s, the polls 70 s, its stop 20 s),
#: so that a mail not sent fails with its poll's message and the worker's log.
pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(150)]


@pytest.fixture
def env(redis_url: str, smtp_server: SmtpTestServer) -> Iterator[dict[str, str]]:
    """Worker settings with a 1 s outbox grace, in force in this process too (it enqueues with
    ``send_mail.apply_async``, as a web process with the workers' ``MAILGUARD_*`` does)."""
    env = worker_env(
        redis_url, smtp_server.url, MAILGUARD_POLICY="100/1s", MAILGUARD_OUTBOX_GRACE="1s"
    )
    box = redis.Redis.from_url(outbox_url(Settings.from_env(env)))
    stale = list(box.scan_iter(match="mailguard:{outbox:*"))  # other files' mails, same Redis
    if stale:
        box.delete(*stale)
    box.close()
    previous = tasks.use_settings(Settings.from_env(env))
    yield env
    tasks.use_settings(previous)


@pytest.fixture
def app(env: dict[str, str]) -> Iterator[Any]:
    app = client_app(env)
    yield app
    app.close()


def _send(app: Any, mail_id: str) -> Any:
    send_mail = app.tasks[tasks.send_mail.name]
    call = {"subject": mail_id, "body": "x", "mail_id": mail_id}
    return send_mail.apply_async(args=[f"{mail_id}@example.com"], kwargs=call)


def _steal(env: dict[str, str], task_id: str) -> tuple[bytes, bytes]:
    """Remove task ``task_id``'s message from the broker's lists, as a consumer killed right
    after its ``BRPOP`` would; its list and the message as it was."""
    broker = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
    try:
        for key in broker.scan_iter("mail*", _type="list"):
            if broker.type(key) != b"list":
                continue
            for raw in broker.lrange(key, 0, -1):
                if json.loads(raw)["headers"]["id"] == task_id:
                    assert broker.lrem(key, 1, raw) == 1
                    return key, raw
    finally:
        broker.close()
    raise AssertionError(f"task {task_id} not queued")


def _delivered(smtp: SmtpTestServer) -> dict[str, list[float]]:
    """Receipt times by Message-ID, from the SMTP server's log."""
    got: dict[str, list[float]] = {}
    for d in smtp.delivered:
        got.setdefault(str(d.message["Message-ID"]), []).append(d.received_at)
    return got


def _outbox_size() -> int:
    """How many entries the outbox holds, this process's writes applied first."""
    box = outbox.outbox_for(tasks.settings)
    assert isinstance(box, RedisOutbox)
    box.settle()
    return box.size()


def test_a_first_message_lost_at_the_pop_is_sent_once(
    env: dict[str, str], app: Any, smtp_server: SmtpTestServer
) -> None:
    """Given two mails enqueued and the first one's message popped and dropped before any
    worker runs, when a worker starts, then its watchdog publishes the lost one again (one log
    line) and not the other; each is sent exactly once, the lost one within the grace, two
    looks and the restart allowance of the worker's ready; the outbox ends empty. When the
    stolen message then comes back after all (a copy published for a mail that was not lost),
    it runs and sends nothing: the ledger answers its outcome."""
    lost = _send(app, "lost-1")
    kept = _send(app, "kept-1")
    key, stolen = _steal(env, lost.id)
    assert _outbox_size() == 2
    worker = CeleryWorker(env).start()
    ready = time.time()
    finished = f"Task mailguard.send_mail[{lost.id}] succeeded"
    try:
        poll(lambda: lost.ready() and kept.ready(), 30, "both mails to be sent")
        poll(lambda: _outbox_size() == 0, 10, "the copy's receipt to clear its entry")
        broker = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
        broker.lpush(key, stolen)
        broker.close()
        poll(lambda: worker.log().count(finished) == 2, 20, "the stolen copy to run")
        log = worker.log()
    finally:
        worker.stop()
    assert log.count("mailguard watchdog: mail lost-1 published again") == 1, log[-3000:]
    assert "kept-1 published again" not in log
    delivered = _delivered(smtp_server)
    for result in (lost, kept):
        outcome = result.get(timeout=1)
        assert outcome["status"] == "sent", outcome
        assert len(delivered[message_id(outcome["mail_id"], SENDER)]) == 1
    arrived = delivered[message_id("lost-1", SENDER)][0]
    assert arrived - ready <= ON_TIME, f"lost-1 sent {arrived - ready:.2f} s after ready"
    print(f"lost first message sent {arrived - ready:.2f} s after the worker was ready")


def test_a_backlog_older_than_the_grace_is_not_doubled(
    env: dict[str, str], app: Any, smtp_server: SmtpTestServer
) -> None:
    """Given one worker process taking one message at a time and an SMTP server that answers
    each DATA after 0.3 s, when 24 mails are enqueued over 2.4 s, then most wait in the queue
    far longer than the 1 s grace while the worker receives the ones before them; the watchdog
    publishes none of them again: 24 mails, each sent exactly once, the outbox empty."""
    smtp_server.slow_data(0.3, times=24)
    worker = CeleryWorker(env, concurrency=1).start()
    results, enqueued = [], {}
    try:
        for n in range(24):
            results.append(_send(app, f"bulk-{n:02}"))
            enqueued[message_id(f"bulk-{n:02}", SENDER)] = time.time()
            time.sleep(0.1)  # spread over more than the order slack: the marks move past some
        try:
            poll(lambda: all(r.ready() for r in results), 60, "every mail to be sent")
            poll(lambda: _outbox_size() == 0, 10, "every entry to be cleared")
        except AssertionError as exc:
            states = {r.id: r.state for r in results if not r.ready()}
            raise AssertionError(f"{exc}: {states}\n{worker.log()[-6000:]}") from exc
        log = worker.log()
    finally:
        worker.stop()
    assert "published again" not in log, log[-3000:]
    delivered = _delivered(smtp_server)
    assert len(delivered) == 24 and all(len(times) == 1 for times in delivered.values())
    for result in results:
        assert result.get(timeout=1)["status"] == "sent"
    waited = max(times[0] - enqueued[mid] for mid, times in delivered.items())
    assert waited > 3 * GRACE, f"no backlog: the longest wait was {waited:.2f} s"
    print(f"backlog: the longest wait from enqueue to delivery {waited:.2f} s, none doubled")
