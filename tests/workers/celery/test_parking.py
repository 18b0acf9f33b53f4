"""Parked mails with a real worker, real Redis and real SMTP: sent once at their slot, through
kills of every worker and a promotion cut short by a kill; bad entries are dead letters.

Times are checked as invariants against the SMTP server's own receipt time: never before the
slot (less 50 ms of clock granularity), and at most about a second after max(slot, restart).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery.result import AsyncResult

from devservers.celery_worker import ROOT, CeleryWorker, client_app, start_all, worker_env
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from mailer.mail.message import message_id
from mailer.outcomes import Outcome
from mailer.records.schedule import RedisSchedule
from mailer.settings import Settings
from mailer.steps import Later, Progress
from tests.waiting import poll
from workers.polling.promoter import KILL_AFTER_PUBLISH
from workers.waiting import parking
from workers.waiting.outcomes import read_state
from workers.waiting.payload import Parked

TASK = "mailguard.send_mail"
SENDER = "mailguard@example.org"
EARLY_SLACK = 0.05  # seconds: the worker's and the SMTP server's clocks are the same clock

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def schedule(redis_url: str) -> Iterator[RedisSchedule]:
    """The workers' schedule (the ledger's Redis: db 0 of ``worker_env``)."""
    url = redis_url.rsplit("/", 1)[0] + "/0"
    client = redis.Redis.from_url(url)
    yield RedisSchedule(client, url)
    client.close()


def _send(app: Any, to: str, mail_id: str) -> AsyncResult:
    return app.send_task(
        TASK, args=[to], kwargs={"subject": mail_id, "body": "x", "mail_id": mail_id}
    )


def _received(smtp: SmtpTestServer) -> dict[str, list[float]]:
    """Receipt times by Message-ID, from the SMTP server's log."""
    got: dict[str, list[float]] = {}
    for d in smtp.delivered:
        got.setdefault(str(d.message["Message-ID"]), []).append(d.received_at)
    return got


def test_a_parked_mail_is_sent_once_at_its_slot(
    redis_url: str, smtp_server: SmtpTestServer, schedule: RedisSchedule
) -> None:
    """Three mails to one address under ``1/3s``: the first goes now, the others wait 3 and 6
    s, longer than ``PARK_AFTER`` (1 s): they are parked (DEFERRED with tier and due, nothing in
    the broker), then each is sent once, never before its slot, within a second of it. An
    undecodable entry parked beside them goes to the dead letters and blocks nothing."""
    env = worker_env(
        redis_url, smtp_server.url, MAILGUARD_POLICY="1/3s, 50/1h", MAILGUARD_PARK_AFTER="1s"
    )
    app = client_app(env)
    worker = CeleryWorker(env).start()
    broker = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
    try:
        schedule.park("junk", time.time(), b"\xffnot a payload")
        results = [_send(app, "ada@example.com", f"park-{n}") for n in range(3)]
        # the junk entry counts as parked until the promoter buries it: wait for the mails
        poll(lambda: sum(r.state == "DEFERRED" for r in results) == 2, 10, "two booked mails")
        deferred = [r for r in results if r.state == "DEFERRED"]
        for result in deferred:
            assert result.info["tier"] == "1/3s" and result.info["due"] > time.time()
            assert None not in result.info.values(), "a waiting record keeps no empty field"
            state, whole = read_state(app, result.id)  # the reading side: every field
            assert (state, whole) == (
                "DEFERRED",
                Outcome.from_waiting_dict(result.info, result.id).as_dict(),
            )
        poll(lambda: broker.hlen("unacked") == 0, 5, "the runs to end")
        assert broker.llen("mail") == 0, "a parked mail is not held by the broker"
        assert [r.state for r in deferred] == ["DEFERRED", "DEFERRED"]
        poll(lambda: schedule.stats().dead == 1, 5, "the undecodable entry to be buried")
        assert schedule.dead_letters() == [("junk", b"\xffnot a payload")]
        poll(lambda: all(r.ready() for r in results), 20, "every mail to be sent")
    finally:
        worker.stop()
        broker.close()
        app.close()
    received = _received(smtp_server)
    for result in results:
        outcome = result.get(timeout=1)
        times = received[message_id(outcome["mail_id"], SENDER)]
        assert outcome["status"] == "sent" and len(times) == 1, (outcome, times)
        late = times[0] - outcome["due"]
        assert -EARLY_SLACK <= late <= 1.0, f"{outcome['mail_id']} sent {late:+.3f} s from its slot"
    assert schedule.stats() == schedule.stats().__class__(0, 0, 1, None)


#: Seconds between two first mails of ``test_every_worker_killed_with_parked_mails``: 100
#: recipients' first mails offered at 33 a second, so each later round falls due at that rate,
#: under what one restarted worker sends on a loaded 2-core machine (about 80 a second beside the
#: whole suite). Offered all at once, the 100 mails of a round fall due within 0.3 s and the
#: last waits for the 99 before it: the round's length at the worker's rate, not promotion.
FIRST_MAILS_APART = 0.03


def test_every_worker_killed_with_parked_mails(
    redis_url: str, smtp_server: SmtpTestServer, schedule: RedisSchedule
) -> None:
    """100 recipients, 3 mails each under ``1/10s``: 200 mails parked (slots 10 and 20 s ahead,
    so that all are parked before the first is due, even on a loaded machine).
    Both workers are SIGKILLed, one is started again: every mail is sent exactly once, never
    before its slot, and none more than about a second after max(slot, restart)."""
    env = worker_env(
        redis_url, smtp_server.url, MAILGUARD_POLICY="1/10s, 50/1h", MAILGUARD_PARK_AFTER="1s"
    )
    app = client_app(env)
    workers = start_all([CeleryWorker(env, name=f"w{n}") for n in range(2)])
    results = []
    for r in range(100):
        results.append(_send(app, f"user{r}@example.com", f"kill-{r}-0"))
        time.sleep(FIRST_MAILS_APART)
    results += [
        _send(app, f"user{r}@example.com", f"kill-{r}-{n}") for n in (1, 2) for r in range(100)
    ]
    try:
        poll(lambda: schedule.stats().parked == 200, 30, "200 parked mails")
        for worker in workers:
            worker.kill()
        time.sleep(1.0)
        again = CeleryWorker(env, name="again").start()
        restart = time.time()
        try:
            poll(lambda: all(r.ready() for r in results), 40, "every mail to settle")
        finally:
            again.stop()
    finally:
        for worker in workers:
            worker.kill()
        app.close()
    received = _received(smtp_server)
    copies = Counter(len(times) for times in received.values())
    late: list[tuple[float, str, float]] = []  # (lateness, mail id, due - restart)
    for result in results:
        outcome = result.get(timeout=1)
        assert outcome["status"] == "sent", outcome
        (at,) = received[message_id(outcome["mail_id"], SENDER)]
        if outcome["due"] is not None:
            assert at >= outcome["due"] - EARLY_SLACK, f"{outcome['mail_id']} sent early"
            late.append(
                (at - max(outcome["due"], restart), outcome["mail_id"], outcome["due"] - restart)
            )
    late.sort()
    lateness = [seconds for seconds, _, _ in late]
    p50, p99 = lateness[len(lateness) // 2], lateness[int(len(lateness) * 0.99)]
    print(
        f"{len(lateness)} mails, sent after max(slot, restart): p50 {p50:.3f} s, "
        f"p99 {p99:.3f} s, max {lateness[-1]:.3f} s"
    )
    worst = ", ".join(f"{m} {s:.3f} s late (due {d:+.3f} s from restart)" for s, m, d in late[-5:])
    assert copies == {1: 300}, copies
    assert p99 <= 1.0, worst
    assert lateness[-1] <= 1.5, worst


def test_a_promotion_cut_short_by_a_kill_sends_one_mail(
    redis_url: str, smtp_server: SmtpTestServer, schedule: RedisSchedule
) -> None:
    """A worker publishes a parked mail and is SIGKILLed before it forgets the entry (a test
    hook). Another worker takes the entry again once the lease ends and publishes a second
    copy; the ledger answers it with the recorded outcome: one mail, and the schedule empty."""
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="1/2s, 50/1h",
        MAILGUARD_PARK_AFTER="1s",
        MAILGUARD_PROMOTE_LEASE="2s",
        MAILGUARD_VISIBILITY_TIMEOUT="3s",
        MAILGUARD_RESTORE_INTERVAL="500ms",
    )
    app = client_app(env)
    doomed = CeleryWorker(env | {KILL_AFTER_PUBLISH: "0.5"}, name="doomed").start()
    results = [_send(app, "ada@example.com", f"race-{n}") for n in range(2)]
    try:
        poll(
            lambda: doomed.process is not None and doomed.process.poll() is not None,
            15,
            "the worker to kill itself after publishing " + doomed.log()[-2000:],
        )
        assert schedule.stats().promoting == 1, "published, not forgotten"
        again = CeleryWorker(env, name="again").start()
        try:
            poll(lambda: all(r.ready() for r in results), 20, "both mails " + again.log()[-3000:])
            poll(lambda: schedule.stats().promoting == 0, 10, "the lease to be taken again")
            # The second copy runs and sends nothing. Seldom (a loaded machine) the first copy
            # never reaches a run: the doomed worker had taken it off the queue when it was
            # killed, before kombu wrote it to its unacked hash. Then the copy the lease
            # brought back is the one sent: what matters is that no copy is left to send.
            broker = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
            poll(
                lambda: (
                    "nothing sent again" in again.log()
                    or (
                        again.log().count("received") == 1
                        and broker.llen("mail") == 0
                        and broker.hlen("unacked") == 0
                    )
                ),
                30,  # a copy that ran beside the first waits for its claim to be given back
                "the second copy to run " + again.log()[-4000:] + doomed.log()[-2000:],
            )
            broker.close()
        finally:
            again.stop()
    finally:
        doomed.kill()
        app.close()
    received = _received(smtp_server)
    assert sorted(len(t) for t in received.values()) == [1, 1], received
    assert [r.get(timeout=1)["status"] for r in results] == ["sent", "sent"]


def test_a_parked_payload_is_the_same_mail() -> None:
    """A payload decodes to the task id, call and due it was made from; anything else is a
    ``ValueError`` (what the promoter buries)."""
    entry = Parked("t1", ["ada@example.com"], {"mail_id": "m1", "_requested_at": 1.5}, 12.25)
    assert Parked.decode(entry.encode(), "m1") == entry
    same = Parked("m1", ["ada@example.com"], {"mail_id": "m1"}, 12.25)
    assert b'"t1"' not in same.encode() and Parked.decode(same.encode(), "m1") == same
    for bad in (None, b"\xff", b"[]", b'{"v": 2}', b'{"v": 1, "task": "t", "args": []}'):
        with pytest.raises(ValueError):
            Parked.decode(bad, "m1")


@pytest.mark.server  # an in-process Celery worker, in a subprocess
def test_the_memory_schedule_parks_and_promotes_in_one_process() -> None:
    """With the embedded defaults (memory broker, limiter, ledger and schedule; an in-process
    threads worker), a mail booked 5 s ahead with ``PARK_AFTER`` 1 s is parked in the
    process's schedule, promoted by the worker's own promoter and sent at its slot (5 s: its
    run may come seconds late on a loaded machine and still wait more than the 1 s)."""
    script = (
        "import json, time\n"
        "from workers.app import app\n"
        "from workers.tasks import send_mail, settings\n"
        "from workers.brokers.inprocess import inprocess_worker\n"
        "from workers.waiting.parking import schedule_for\n"
        "with inprocess_worker(app):\n"
        "    send_mail.delay('ada@example.com', subject='s', body='b').get(timeout=20)\n"
        "    second = send_mail.delay('ada@example.com', subject='s', body='b')\n"
        "    deadline = time.monotonic() + 20\n"
        "    while second.state == 'PENDING' and time.monotonic() < deadline:\n"
        "        time.sleep(0.05)\n"
        "    parked = schedule_for(settings).stats().parked\n"
        "    outcome = second.get(timeout=20)\n"
        "    print(json.dumps([parked, outcome, time.time()]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
    env |= {"PYTHONPATH": str(ROOT), "MAILGUARD_POLICY": "1/5s, 50/1h"}
    env |= {"MAILGUARD_PARK_AFTER": "1s", "MAILGUARD_SMTP_URL": "memory://"}
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
    parked, outcome, _ = json.loads(done.stdout.strip().splitlines()[-1])
    assert parked == 1
    assert outcome["status"] == "sent" and outcome["deferrals"] == 1
    assert outcome["sent_at"] >= outcome["due"] - EARLY_SLACK
    assert outcome["sent_at"] - outcome["due"] <= 1.0


def test_parked_mails_survive_a_restart_of_their_redis(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """The limiter-and-ledger Redis (append-only, where the schedule lives) is SIGKILLed and
    started again while 5 mails are parked: every mail is still sent exactly once."""
    store = RedisServer(extra_args=("--appendonly", "yes", "--appendfsync", "always")).start()
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_LIMITER_URL=store.url,
        MAILGUARD_POLICY="1/3s, 50/1h",
        MAILGUARD_PARK_AFTER="1s",
    )
    schedule_client = redis.Redis.from_url(store.url)
    schedule = RedisSchedule(schedule_client, store.url)
    app = client_app(env)
    worker = CeleryWorker(env).start()
    try:
        results = [
            _send(app, f"user{r}@example.com", f"aof-{r}-{n}") for n in range(2) for r in range(5)
        ]
        poll(lambda: schedule.stats().parked == 5, 15, "5 parked mails")
        store.restart()
        poll(lambda: all(r.ready() for r in results), 30, "every mail to settle")
    finally:
        worker.stop()
        app.close()
        schedule_client.close()
        store.cleanup()
    assert [r.get(timeout=1)["status"] for r in results] == ["sent"] * 10
    assert sorted(len(t) for t in _received(smtp_server).values()) == [1] * 10


def test_a_run_that_cannot_reach_the_schedule_keeps_a_bounded_countdown() -> None:
    """Parking with the schedule's Redis down answers None (the run then holds a countdown no
    longer than ``min(MAX_COUNTDOWN, PARK_AFTER)``): nothing is lost, nothing raised."""
    settings = Settings(limiter_url="redis://127.0.0.1:1/0", secret="s", park_after=1.0)
    later = Later(
        600.0,
        Outcome(status="deferred", mail_id="m", kind="default", reason="booked", due=1e10),
        Progress(),
    )
    kwargs = {"mail_id": "m"}
    assert parking.park(settings, later, task_id="m", args=["a@example.com"], kwargs=kwargs) is None
    assert settings.longest_countdown == 1.0


def test_a_promoted_mail_keeps_its_task_id_request_time_progress_and_priority(
    redis_url: str,
) -> None:
    """The promoter publishes a parked mail under its task id, with its ``_requested_at`` and
    sealed ``_progress`` as parked, one step above its kind's priority (a booked mail: ``news``
    is 2, so 3, Redis step 6)."""
    import base64  # noqa: PLC0415

    from mailer.records.schedule import MemorySchedule  # noqa: PLC0415
    from workers.polling.promoter import Promoter  # noqa: PLC0415

    env = worker_env(redis_url, "memory://", MAILGUARD_KIND_NEWS_PRIORITY="2")
    app = client_app(env)
    schedule = MemorySchedule()
    kwargs = {"kind": "news", "mail_id": "m1", "_requested_at": 1.5, "_progress": "sealed"}
    schedule.park("m1", time.time(), Parked("task-1", ["ada@example.com"], kwargs, 0.0).encode())
    promoter = Promoter(app, schedule, Settings.from_env(env))
    try:
        assert promoter.promote_once() == 1
    finally:
        app.close()
    broker = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
    queued = broker.lrange(b"mail\x06\x166", 0, -1)
    broker.close()
    assert len(queued) == 1, "one message, on the list of priority step 6"
    message = json.loads(queued[0])
    assert message["headers"]["id"] == "task-1" and message["properties"]["priority"] == 6
    args, sent_kwargs, _ = json.loads(base64.b64decode(message["body"]))
    assert args == ["ada@example.com"] and sent_kwargs == kwargs
    assert schedule.stats().promoting == 0, "forgotten once published"


def park_a_second_mail(
    app: Any, schedule: RedisSchedule, kwargs: dict[str, Any]
) -> AsyncResult[Any]:
    """Send Ada a first mail (sent at once), then a second with ``kwargs``, parked by its first
    run under ``1/3s`` with ``PARK_AFTER`` 1 s; the second's result."""
    first = app.send_task(TASK, args=["ada@example.com"], kwargs={"subject": "a", "body": "x"})
    poll(lambda: first.state == "SUCCESS", 10, "the first mail sent")
    waiting = app.send_task(TASK, args=["ada@example.com"], kwargs=kwargs)
    poll(lambda: schedule.stats().parked == 1, 10, "the second mail parked")
    return waiting


def redeliver(app: Any, env: dict[str, str], kwargs: dict[str, Any], task_id: str) -> None:
    """Publish task ``task_id``'s first message again as kombu's Redis restore brings one back:
    published to a list no worker reads, flagged ``redelivered`` there (headers and
    ``delivery_info``, as ``_do_restore_message`` does), then pushed onto the worker's queue."""
    app.send_task(TASK, args=["ada@example.com"], kwargs=kwargs, task_id=task_id, queue="aside")
    broker = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
    try:
        raw = broker.rpop("aside")
        assert raw is not None, "the copy was published"
        payload = json.loads(raw)
        payload["headers"]["redelivered"] = True
        payload["properties"]["delivery_info"]["redelivered"] = True
        broker.lpush("mail", json.dumps(payload))
    finally:
        broker.close()


def test_a_parked_first_turn_leaves_the_ledger_nothing_and_a_first_copy_ends(
    redis_url: str, smtp_server: SmtpTestServer, schedule: RedisSchedule
) -> None:
    """A mail parked by its first run (a task id, so a UUID: stored as 17 bytes) leaves no key
    in the ledger: its claim and first time seen went once its payload was parked. Its first
    message delivered again (flagged ``redelivered``, as kombu's restore brings it back) ends at
    its claim, a stale copy: nothing sent, its entry untouched; the mail is sent once, at its
    slot."""
    env = worker_env(
        redis_url, smtp_server.url, MAILGUARD_POLICY="1/3s, 50/1h", MAILGUARD_PARK_AFTER="1s"
    )
    app = client_app(env)
    worker = CeleryWorker(env).start()
    ledger = schedule.client
    try:
        kwargs = {"subject": "b", "body": "x"}
        waiting = park_a_second_mail(app, schedule, kwargs)
        poll(lambda: not ledger.keys(f"mailguard:*{{{waiting.id}}}"), 5, "the claim dropped")
        entry = schedule.payload(waiting.id)
        assert entry is not None and ledger.hkeys(schedule.shards[0].payloads_key) != [
            waiting.id.encode()
        ], "stored as 17 bytes"
        redeliver(app, env, kwargs, waiting.id)
        poll(lambda: "a stale copy (turn 0) ended" in worker.log(), 10, "the copy to end")
        assert schedule.payload(waiting.id) == entry and waiting.state == "DEFERRED"
        assert not ledger.keys(f"mailguard:claim:{{{waiting.id}}}")
        outcome = waiting.get(timeout=10)
    finally:
        worker.stop()
        app.close()
    times = _received(smtp_server)[message_id(waiting.id, SENDER)]
    assert outcome["status"] == "sent" and len(times) == 1, (outcome, times)
    assert -EARLY_SLACK <= times[0] - outcome["due"] <= 1.0


def test_a_parked_first_turn_published_twice_by_its_producer_is_sent_once(
    redis_url: str, smtp_server: SmtpTestServer, schedule: RedisSchedule
) -> None:
    """A first message published a second time, not flagged as a redelivery (a producer that
    published twice), after its first run parked the mail: the copy claims the mail as a first
    run, finds its own booking in the recipient's log (the same slot), and parks the same entry
    again; the mail is sent once, at the slot first booked."""
    env = worker_env(
        redis_url, smtp_server.url, MAILGUARD_POLICY="1/3s, 50/1h", MAILGUARD_PARK_AFTER="1s"
    )
    app = client_app(env)
    worker = CeleryWorker(env).start()
    try:
        kwargs = {"subject": "b", "body": "x"}
        waiting = park_a_second_mail(app, schedule, kwargs)
        stored = schedule.payload(waiting.id)
        assert stored is not None
        due = Parked.decode(stored, waiting.id).due
        app.send_task(TASK, args=["ada@example.com"], kwargs=kwargs, task_id=waiting.id)
        outcome = waiting.get(timeout=15)
        assert schedule.stats().parked == 0
    finally:
        worker.stop()
        app.close()
    times = _received(smtp_server)[message_id(waiting.id, SENDER)]
    assert outcome["status"] == "sent" and len(times) == 1, (outcome, times)
    assert outcome["due"] == pytest.approx(due, abs=0.002), "the slot first booked"
    assert -EARLY_SLACK <= times[0] - outcome["due"] <= 1.0
