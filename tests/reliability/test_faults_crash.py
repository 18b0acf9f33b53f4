"""Booked mails held as countdowns survive any crash on time: real workers, Redis and SMTP.

A booked mail that waits as a countdown a worker holds has its payload watched in the schedule;
the promoter's watchdog publishes it again when no run of it is seen shortly after its
countdown's end. So neither a worker's SIGKILL, nor a broker restart, nor kombu losing the
message it popped decides when the mail goes (the broker's visibility timeout stays at its
derived 360 s in the kill test): each is sent once, within 3 s of max(its slot, a worker running
again), by the SMTP server's own clock. Every test audits the SMTP server's log: one copy per
Message-ID, none lost.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from celery.result import AsyncResult

from devservers.celery_worker import CeleryWorker, client_app, start_all, stop_all, worker_env
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from mailer.mail.message import message_id
from mailer.records.schedule import RedisSchedule
from mailer.settings import Settings
from tests.reliability.broker_state import BROKER_DB, unacked_headers
from tests.waiting import poll
from workers import tasks
from workers.polling.promoter import KILL_AFTER_PUBLISH, POLL

TASK = "mailguard.send_mail"
SENDER = "mailguard@example.org"
EARLY_SLACK = 0.05  # seconds: the worker's and the SMTP server's clocks are the same clock
ON_TIME = 3.0  # seconds after max(slot, restart): the promise
AOF = ("--appendonly", "yes", "--appendfsync", "always")

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def broker() -> Iterator[RedisServer]:
    """A broker Redis of this test's own, append-only (a restart keeps its lists and unacked)."""
    server = RedisServer(extra_args=AOF).start()
    yield server
    server.cleanup()


def _env(redis_url: str, smtp: SmtpTestServer, broker: RedisServer, **extra: str) -> dict[str, str]:
    base = redis_url.rsplit("/", 1)[0]
    return worker_env(
        redis_url,
        smtp.url,
        MAILGUARD_BROKER_URL=f"redis://127.0.0.1:{broker.port}/1",
        MAILGUARD_RESULT_BACKEND=f"{base}/2",
        **extra,
    )


def _schedule(redis_url: str) -> RedisSchedule:
    url = redis_url.rsplit("/", 1)[0] + "/0"
    return RedisSchedule(redis.Redis.from_url(url), url)


def _send(app: Any, to: str, mail_id: str) -> AsyncResult[Any]:
    kwargs = {"subject": mail_id, "body": "x", "mail_id": mail_id}
    return app.send_task(TASK, args=[to], kwargs=kwargs)


def _delay(app: Any, to: str, mail_id: str) -> AsyncResult[Any]:
    """``send_mail.apply_async`` as the caller's process makes it (this process's settings are
    the workers': :func:`workers.tasks.use_settings`), so its outbox entry is written first."""
    kwargs = {"subject": mail_id, "body": "x", "mail_id": mail_id}
    return app.tasks[TASK].apply_async(args=[to], kwargs=kwargs)  # type: ignore[no-any-return]


def _received(smtp: SmtpTestServer) -> dict[str, list[float]]:
    """Receipt times by Message-ID, from the SMTP server's log."""
    got: dict[str, list[float]] = {}
    for d in smtp.delivered:
        got.setdefault(str(d.message["Message-ID"]), []).append(d.received_at)
    return got


def _audit(smtp: SmtpTestServer, results: list[AsyncResult[Any]], back: float) -> list[float]:
    """Each mail sent exactly once, never before its slot; how long after max(slot, ``back``)
    each booked one arrived (seconds, by the SMTP server's clock)."""
    received = _received(smtp)
    late = []
    for result in results:
        outcome = result.get(timeout=1)
        assert outcome["status"] == "sent", outcome
        times = received.get(message_id(outcome["mail_id"], SENDER), [])
        assert len(times) == 1, (outcome["mail_id"], times)
        if outcome["deferrals"]:
            assert times[0] >= outcome["due"] - EARLY_SLACK, f"{outcome['mail_id']} sent early"
            late.append(times[0] - max(outcome["due"], back))
    return sorted(late)


def _holds_only_countdowns(
    broker: RedisServer, results: list[AsyncResult[Any]], schedule: RedisSchedule, booked: int
) -> bool:
    """All but ``booked`` of ``results`` finished and stored; the ``booked`` others booked,
    watched, and their countdown messages held by a worker (in the broker's ``unacked`` hash,
    each with an ``eta``); nothing else in flight: no message queued, none unacknowledged but
    the countdowns. A worker killed then holds countdowns and nothing else: no run cut short
    between its send and its result, no countdown still in the queue for the next worker."""
    states = ["DEFERRED"] * booked + ["SUCCESS"] * (len(results) - booked)
    if sorted(r.state for r in results) != states:
        return False
    if schedule.stats().watched != booked:
        return False
    client = redis.Redis(port=broker.port, db=BROKER_DB)
    try:
        queued = sum(client.llen(key) for key in client.scan_iter("mail*", _type="list"))
    finally:
        client.close()
    held = unacked_headers(broker.port)
    etas = [headers for headers in held if headers.get("eta") is not None]
    return queued == 0 and len(held) == len(etas) == booked


def test_a_killed_worker_s_countdowns_are_sent_on_time(
    redis_url: str, smtp_server: SmtpTestServer, broker: RedisServer
) -> None:
    """The reproduction: policy ``1/10s``, three mails to one recipient (slots now, +10 s,
    +20 s: countdowns, under ``PARK_AFTER`` 30 s), the worker SIGKILLed 2 s later, another
    started 2 s after. The broker's visibility timeout is the derived 360 s: the watchdog
    sends the booked two within 3 s of their slots, once each."""
    env = _env(redis_url, smtp_server, broker, MAILGUARD_POLICY="1/10s, 50/1h")
    app = client_app(env)
    schedule = _schedule(redis_url)
    doomed = CeleryWorker(env, name="doomed").start()
    results = [_send(app, "ada@example.com", f"kill-{n}") for n in range(3)]
    try:
        poll(
            lambda: _holds_only_countdowns(broker, results, schedule, 2),
            15,
            "one mail sent, two countdowns held " + doomed.log()[-2000:],
        )
        time.sleep(2.0)
        doomed.kill()
        time.sleep(2.0)
        again = CeleryWorker(env, name="again").start()
        back = time.time()
        try:
            poll(lambda: all(r.ready() for r in results), 40, "every mail " + again.log()[-3000:])
            assert again.log().count("mailguard watchdog: mail kill-") == 2, again.log()[-3000:]
        finally:
            again.stop()
    finally:
        doomed.kill()
        app.close()
    late = _audit(smtp_server, results, back)
    print(
        f"SIGKILL, countdowns: sent after max(slot, restart): {', '.join(f'{s:.2f}' for s in late)}"
    )
    assert len(late) == 2 and late[-1] <= ON_TIME, late
    assert schedule.stats().watched == 0
    schedule.client.close()


def test_a_copy_restored_after_the_watchdog_sent_its_mail_ends_as_a_repeat(
    redis_url: str, smtp_server: SmtpTestServer, broker: RedisServer
) -> None:
    """As above with a visibility timeout of 12 s: the killed worker's countdown messages come
    back from the broker's unacked hash after the watchdog's copies were sent; each restored
    copy finds the mail's sent marker and sends nothing."""
    env = _env(
        redis_url,
        smtp_server,
        broker,
        MAILGUARD_POLICY="1/6s, 50/1h",
        MAILGUARD_VISIBILITY_TIMEOUT="12s",
        MAILGUARD_RESTORE_INTERVAL="500ms",
    )
    app = client_app(env)
    schedule = _schedule(redis_url)
    doomed = CeleryWorker(env, name="doomed").start()
    results = [_send(app, "bob@example.com", f"restore-{n}") for n in range(2)]
    try:
        poll(
            lambda: _holds_only_countdowns(broker, results, schedule, 1),
            15,
            "one mail sent, the other's countdown held " + doomed.log()[-2000:],
        )
        doomed.kill()
        again = CeleryWorker(env, name="again").start()
        back = time.time()
        try:
            poll(lambda: all(r.ready() for r in results), 20, "both mails " + again.log()[-3000:])
            poll(
                lambda: "already sent; nothing sent again" in again.log(),
                25,
                "the restored copy to run " + again.log()[-3000:],
            )
        finally:
            again.stop()
    finally:
        doomed.kill()
        app.close()
    late = _audit(smtp_server, results, back)
    assert len(late) == 1 and late[0] <= ON_TIME, late
    schedule.client.close()


def test_a_broker_restart_with_countdown_held_mails(
    redis_url: str, smtp_server: SmtpTestServer, broker: RedisServer
) -> None:
    """Six recipients, three mails each under ``1/5s`` (countdowns to +5 s and +10 s), two
    workers; the broker's Redis (append-only) SIGKILLed 1 s after the bookings and started 3 s
    later. The workers lose the countdowns they held (their consumers restart); the watchdog
    sends every booked mail once, within 3 s of max(its slot, the broker back)."""
    env = _env(redis_url, smtp_server, broker, MAILGUARD_POLICY="1/5s, 50/1h")
    app = client_app(env)
    schedule = _schedule(redis_url)
    workers = start_all([CeleryWorker(env, name=f"w{n}") for n in range(2)])
    results = [
        _send(app, f"user{r}@example.com", f"broker-{r}-{n}") for n in range(3) for r in range(6)
    ]
    try:
        poll(lambda: sum(r.state == "DEFERRED" for r in results) == 12, 15, "12 booked mails")
        time.sleep(1.0)
        broker.stop()
        time.sleep(3.0)
        broker.start()
        back = time.time()
        poll(
            lambda: all(r.ready() for r in results),
            40,
            "every mail " + "".join(w.log()[-2000:] for w in workers),
        )
        for worker in workers:
            assert worker.process is not None and worker.process.poll() is None, worker.log()
    finally:
        stop_all(workers)
        app.close()
    late = _audit(smtp_server, results, back)
    print(
        f"broker restart: {len(late)} booked mails, latest {late[-1]:.2f} s after max(slot, back)"
    )
    assert len(late) == 12 and late[-1] <= ON_TIME, late
    poll(lambda: schedule.stats().watched == 0, 5, "no watch left")
    schedule.client.close()


@pytest.mark.timeout(420)  # ten broker restarts; a consumer's reconnection can take seconds
def test_broker_kills_mid_traffic_lose_nothing_and_send_nothing_twice(
    redis_url: str, smtp_server: SmtpTestServer, broker: RedisServer
) -> None:
    """Ten times: a few mails (some booked as countdowns) in flight, the broker's Redis
    SIGKILLed and started again at once, which can catch kombu between its ``BRPOP`` and its
    unacked record. In the end every mail is sent exactly once: 0 lost, 0 twice (the watchdog
    publishes a booked mail whose message was lost, and a first message, enqueued through
    ``send_mail.apply_async`` as a caller does, from its outbox entry). A worker that dies is
    started again; none is killed for being slow."""
    env = _env(
        redis_url,
        smtp_server,
        broker,
        MAILGUARD_POLICY="1/1s, 50/1h",
        MAILGUARD_VISIBILITY_TIMEOUT="20s",
        MAILGUARD_RESTORE_INTERVAL="1s",
    )
    app = client_app(env)
    previous = tasks.use_settings(Settings.from_env(env))
    workers = start_all([CeleryWorker(env, name=f"w{n}") for n in range(2)])
    results: list[AsyncResult[Any]] = []
    deaths: list[str] = []
    try:
        for round_ in range(10):
            batch = [
                _delay(app, f"r{round_}-{r}@example.com", f"bk-{round_}-{r}-{n}")
                for n in range(2)
                for r in range(2)
            ]
            results += batch
            _progress(
                lambda b=batch: all(r.state != "PENDING" for r in b),
                workers,
                env,
                deaths,
                f"round {round_}'s first runs",
                mails=batch,
            )
            broker.stop()
            broker.start()
        _progress(
            lambda: all(r.ready() for r in results),
            workers,
            env,
            deaths,
            "every mail settled",
            mails=results,
        )
    finally:
        stop_all(workers)
        app.close()
        tasks.use_settings(previous)
    received = _received(smtp_server)
    outcomes = [r.get(timeout=1) for r in results]
    lost = [o["mail_id"] for o in outcomes if message_id(o["mail_id"], SENDER) not in received]
    twice = [m for m, times in received.items() if len(times) > 1]
    print(
        f"broker kills: {len(results)} mails, lost {len(lost)}, sent twice {len(twice)}, "
        f"workers restarted {len(deaths)}"
    )
    assert lost == [] and twice == [], deaths
    assert all(o["status"] == "sent" for o in outcomes)


def _progress(
    check: Callable[[], bool],
    workers: list[CeleryWorker],
    env: dict[str, str],
    restarts: list[str],
    what: str,
    *,
    mails: list[AsyncResult[Any]],
) -> None:
    """Wait up to 90 s for ``check``, restarting a worker that died as systemd's
    ``Restart=always`` would (Celery's prefork pool can end a worker on a half-read result
    when the broker connection drops: ``docs/explanation/reliability.md``). A worker that
    lives is never killed: its consumer must come back on its own."""
    start = time.monotonic()
    while time.monotonic() - start < 90:
        for index, worker in enumerate(workers):
            if worker.process is not None and worker.process.poll() is not None:
                restarts.append(f"{worker.name} died: {worker.log()[-300:]}")
                workers[index] = CeleryWorker(env, name=f"{worker.name}r").start()
        if check():
            return
        time.sleep(0.1)
    waiting = {r.id: r.state for r in mails if not r.ready()}  # task ids, as the logs name them
    raise AssertionError(
        f"timed out after 90 s waiting for {what}; not settled: {waiting}; restarts: "
        f"{restarts}; " + "".join(worker.log()[-1500:] for worker in workers)
    )


def test_parking_off_a_refused_deferral_is_kept_and_the_consumer_lives(
    redis_url: str, smtp_server: SmtpTestServer, broker: RedisServer
) -> None:
    """``PARK_AFTER=off``; the worker's broker user loses ``LPUSH`` (the broker refuses every
    publish, as a broker that is down would) before a mail is booked: its countdown cannot be
    published. The mail is kept (its watch), the message acknowledged, and the consumer keeps
    running; once the broker takes messages again the watchdog publishes it: sent once. A
    mail sent afterwards is consumed by the same worker."""
    admin = redis.Redis(port=broker.port)
    admin.execute_command("ACL", "SETUSER", "producer", "on", ">pw", "~*", "&*", "+@all")
    env = _env(
        redis_url, smtp_server, broker, MAILGUARD_POLICY="1/3s, 50/1h", MAILGUARD_PARK_AFTER="off"
    )
    producer_url = f"redis://producer:pw@127.0.0.1:{broker.port}/1"
    producer = client_app(env | {"MAILGUARD_BROKER_URL": producer_url})
    worker = CeleryWorker(env).start()
    try:
        admin.execute_command("ACL", "SETUSER", "default", "-lpush")
        first = _send(producer, "cy@example.com", "off-0")
        poll(lambda: first.state == "SUCCESS", 20, "the first mail sent")
        second = _send(producer, "cy@example.com", "off-1")
        poll(lambda: "kept for the watchdog" in worker.log(), 20, "the refused countdown")
        time.sleep(4.0)  # past its slot: the watchdog cannot publish it either
        assert len(smtp_server.delivered) == 1, "nothing more is sent while the broker refuses"
        assert "could not publish" in worker.log()
        admin.execute_command("ACL", "SETUSER", "default", "+@all")
        poll(lambda: second.state == "SUCCESS", 15, "the kept mail sent " + worker.log()[-3000:])
        third = _send(producer, "dee@example.com", "off-2")
        poll(lambda: third.state == "SUCCESS", 15, "a later mail, by the same consumer")
        assert worker.process is not None and worker.process.poll() is None
        assert "unrecoverable" not in worker.log().lower()
    finally:
        worker.stop()
        producer.close()
        admin.close()
    received = _received(smtp_server)
    for mail_id in ("off-0", "off-1", "off-2"):
        assert len(received[message_id(mail_id, SENDER)]) == 1, mail_id


#: The watchdog test's promotion lease (``MAILGUARD_PROMOTE_LEASE``), seconds.
WATCHDOG_LEASE = 2.0
#: Seconds for one run of one mail on a worker that is ready: hand-off, the guard's limiter and
#: ledger calls, the SMTP send and the stored result. Measured on this suite's loaded 2-core
#: machine beside three CPU hogs (load average 6-9): 0.01-0.55 s from the third worker's
#: "ready." to both results, in 15 runs; 5 s is the room left for a scheduler stall.
ONE_RUN = 5.0


def test_a_watchdog_publish_cut_short_by_a_kill_sends_one_mail(
    redis_url: str, smtp_server: SmtpTestServer, broker: RedisServer
) -> None:
    """The worker holding a countdown is SIGKILLed; the next worker's watchdog publishes the
    mail and is SIGKILLed itself right after, before it forgets the entry (a test hook between
    publish and done). A third worker runs the published copy or, once the lease ends, takes
    the entry again and publishes a second one: one mail is sent, the entry is gone.

    The holder is killed only once the countdown is all it holds (the other mail's run ended
    and stored, the countdown taken from the queue): a run killed between its send and its
    result would leave that result PENDING until the visibility timeout (120 s here) gives its
    message back, and a countdown left in the queue would be run by the next worker with no
    watchdog needed. From the third worker's "ready." the mail is promised within what is left
    of the doomed take's lease, one promoter poll and one run."""
    env = _env(
        redis_url,
        smtp_server,
        broker,
        MAILGUARD_POLICY="1/3s, 50/1h",
        MAILGUARD_PROMOTE_LEASE=f"{WATCHDOG_LEASE:g}s",
        # Long enough that the killed holder's messages never come back during the test: a
        # restored copy run by the next worker would race its watchdog (nothing left to publish).
        MAILGUARD_VISIBILITY_TIMEOUT="120s",
    )
    app = client_app(env)
    schedule = _schedule(redis_url)
    holder = CeleryWorker(env, name="holder").start()
    results = [_send(app, "eve@example.com", f"wd-{n}") for n in range(2)]
    doomed = CeleryWorker(env | {KILL_AFTER_PUBLISH: "0"}, name="doomed")
    try:
        poll(
            lambda: _holds_only_countdowns(broker, results, schedule, 1),
            15,
            "one mail sent, the other's countdown held " + holder.log()[-2000:],
        )
        holder.kill()
        started = time.monotonic()
        try:
            doomed.start(timeout=20)
        except RuntimeError:
            # Its watchdog may publish, and kill it, before it reports ready (the promoter
            # starts before the consumer): died on its own, not at start()'s timeout.
            assert time.monotonic() - started < 20, doomed.log()[-2000:]
        poll(
            lambda: doomed.process is not None and doomed.process.poll() is not None,
            15,
            "the watchdog to publish and die " + doomed.log()[-2000:],
        )
        assert doomed.process is not None and doomed.process.returncode == -signal.SIGKILL
        assert "mailguard watchdog" not in doomed.log(), "killed before done: nothing reported"
        assert schedule.stats().promoting == 1, "published, not forgotten"
        again = CeleryWorker(env, name="again").start()
        try:
            ready = time.monotonic()
            wait = WATCHDOG_LEASE + POLL + ONE_RUN
            poll(lambda: all(r.ready() for r in results), wait, "both mails " + again.log()[-3000:])
            print(f"watchdog cut short: both mails {time.monotonic() - ready:.2f} s after ready")
            poll(lambda: schedule.stats().promoting == 0, 10, "the lease taken again")
        finally:
            again.stop()
    finally:
        holder.kill()
        if doomed.process is not None:  # its pool's children too, if any outlived it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(doomed.process.pid, signal.SIGKILL)
        app.close()
    received = _received(smtp_server)
    assert sorted(len(t) for t in received.values()) == [1, 1], received
    assert [r.get(timeout=1)["status"] for r in results] == ["sent", "sent"]
    schedule.client.close()
