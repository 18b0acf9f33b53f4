"""A deferred mail is not lost when the broker refuses its next run or the result backend is
down while it defers.

Celery's ``Task.retry`` turns a failed publish into ``Reject(requeue=False)``: the message is
acknowledged and gone, the mail's state stays ``DEFERRED`` for ever and it is never sent. The
guard parks such a mail instead, whatever its wait, and the promoter publishes it once the
broker takes messages again. (Without a schedule, parking off, it is rejected *with* requeue:
on a lost connection the broker delivers it again; a broker that refuses the requeue itself,
as this ACL does, ends the worker's consumer with an unrecoverable error, and the message comes
back to the next worker.)

The broker refuses by ACL, so the refusal is exact in time: the worker's broker user loses
``LPUSH`` (what kombu's Redis transport publishes with) after the worker started, while the test
enqueues through a user of its own; consuming and acknowledging need no ``LPUSH``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from mailer.records.schedule import RedisSchedule
from tests.waiting import poll

TASK = "mailguard.send_mail"

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def broker() -> Iterator[RedisServer]:
    """A broker Redis of this test's own (its ACL changes)."""
    server = RedisServer().start()
    yield server
    server.cleanup()


def _refusing(broker: RedisServer, redis_url: str, smtp_url: str, **extra: str) -> tuple[Any, ...]:
    """The worker's environment (broker user ``default``), a producer app (user ``producer``),
    and an admin client of the broker."""
    admin = redis.Redis(port=broker.port)
    admin.execute_command("ACL", "SETUSER", "producer", "on", ">pw", "~*", "&*", "+@all")
    base = redis_url.rsplit("/", 1)[0]
    env = worker_env(
        redis_url,
        smtp_url,
        MAILGUARD_BROKER_URL=f"redis://127.0.0.1:{broker.port}/1",
        MAILGUARD_RESULT_BACKEND=f"{base}/2",
        MAILGUARD_POLICY="1/3s",
        **extra,
    )
    producer_url = f"redis://producer:pw@127.0.0.1:{broker.port}/1"
    return env, client_app(env | {"MAILGUARD_BROKER_URL": producer_url}), admin


def test_a_deferral_the_broker_refuses_is_parked_and_sent_once_the_broker_takes_it(
    broker: RedisServer, redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """Two mails to one recipient under ``1/3s``: the second is booked 3 s ahead (a countdown
    under ``PARK_AFTER`` 30 s), and its countdown's publish is refused. It is parked, not lost;
    while the broker refuses, the promoter cannot publish it either and nothing is sent; once
    the broker takes messages again it is sent, once."""
    env, producer, admin = _refusing(
        broker, redis_url, smtp_server.url, MAILGUARD_PARK_AFTER="30s", MAILGUARD_PROMOTE_LEASE="2s"
    )
    worker = CeleryWorker(env).start()
    store = redis.Redis.from_url(redis_url)
    schedule = RedisSchedule(store, redis_url)
    try:
        admin.execute_command("ACL", "SETUSER", "default", "-lpush")
        first = producer.send_task(TASK, args=["ada@example.com", "one", "b"])
        poll(lambda: first.state == "SUCCESS", 20, "the first mail sent")
        second = producer.send_task(TASK, args=["ada@example.com", "two", "b"])
        poll(lambda: "could not be published" in worker.log(), 20, "the refused countdown")
        assert "parked" in worker.log().split("could not be published", 1)[1].splitlines()[0]
        assert second.state == "DEFERRED"
        stats = schedule.stats()
        assert stats.parked + stats.promoting == 1, stats
        poll(lambda: "could not publish" in worker.log(), 20, "the promoter refused too")
        assert len(smtp_server.delivered) == 1, "nothing more is sent while the broker refuses"

        admin.execute_command("ACL", "SETUSER", "default", "+@all")
        poll(lambda: second.state == "SUCCESS", 30, "the second mail sent once the broker takes it")
        assert second.result["status"] == "sent"
        subjects = sorted(d.message["Subject"] for d in smtp_server.delivered)
        assert subjects == ["one", "two"], "each mail once"
        poll(lambda: schedule.stats().promoting == 0, 10, "the schedule emptied")
        assert schedule.stats().parked == 0
    finally:
        worker.stop(timeout=20)
        producer.close()
        store.close()
        admin.close()


@pytest.mark.parametrize("park_after", ["30s", "1s"])
def test_a_mail_deferred_while_the_result_backend_is_down_is_still_sent(
    redis_url: str, smtp_server: SmtpTestServer, park_after: str
) -> None:
    """The results Redis stopped, two mails to one recipient under ``1/3s``: the second is
    booked (a countdown, or parked with ``PARK_AFTER`` 1 s) although its ``DEFERRED`` state
    cannot be stored, and is sent at its slot; the first was sent too (its result is lost)."""
    results = RedisServer().start()
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_RESULT_BACKEND=results.url,
        MAILGUARD_POLICY="1/3s",
        MAILGUARD_PARK_AFTER=park_after,
    )
    # The producer's own backend: enqueueing through a Redis backend subscribes to the results.
    producer = client_app(env | {"MAILGUARD_RESULT_BACKEND": redis_url.rsplit("/", 1)[0] + "/3"})
    worker = CeleryWorker(env).start()
    try:
        results.stop()
        for subject in ("one", "two"):
            producer.send_task(TASK, args=["ada@example.com", subject, "b"])
        poll(lambda: "DEFERRED state not stored" in worker.log(), 20, "the deferral")
        poll(lambda: len(smtp_server.delivered) == 2, 20, "both mails sent")
        subjects = sorted(d.message["Subject"] for d in smtp_server.delivered)
        assert subjects == ["one", "two"], "each mail once"
        times = sorted(d.received_at for d in smtp_server.delivered)
        assert times[1] - times[0] >= 3 - 0.05, "the second at its slot, not early"
    finally:
        worker.stop(timeout=20)
        producer.close()
        results.cleanup()
