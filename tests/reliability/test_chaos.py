"""The chaos suite: real workers, Redis and SMTP under kills, outages, freezes and bad replies.

Each test starts two prefork workers (concurrency 2) on a broker (Redis; RabbitMQ in one test),
a results Redis, a limiter-and-ledger Redis (append-only, so a restart keeps its data, as
production's should) and an aiosmtpd server, sends a load of mails to a few recipients under
a tight policy (so that mails are deferred and booked while the fault happens), injects one
kind of fault mid-run, and ends with an audit taken from the SMTP server's own log:

- **duplicates**: extra copies of one Message-ID; 0, except where the server accepted a mail
  and dropped the connection before its 250 (the documented at-least-once window): those are
  counted and must carry the same Message-ID;
- **lost**: mails neither delivered nor given a final ``dropped`` / ``failed`` outcome: 0;
- **over-admissions**: per recipient, the booked slots (``due``) of the delivered mails checked
  against every tier of the policy by an independent counter: 0;
- **stuck**: mails without a final state at the deadline: 0;
- **worker deaths**: worker main processes that exited without the test killing them: 0.

The figures of each run are printed (``pytest -s``) and the README's reliability section quotes
them. SMTP faults (451s, a 550, dropped connections, one accepted-then-dropped) are in
``test_chaos_smtp.py``, on this stack: a file of its own, so that the suite's processes (one
file each) run it beside these.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from celery.result import AsyncResult

from devservers.celery_worker import CeleryWorker, client_app, start_all, stop_all, worker_env
from devservers.rabbitmq import RabbitServer
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from mailer import Policy
from mailer.settings import Settings
from tests.reliability.broker_state import BROKER_DB, unacked_headers
from tests.waiting import poll
from workers import tasks

TASK = "mailguard.send_mail"
POLICY = "1/1s, 3/6s"
RECIPIENTS = 8
PER_RECIPIENT = 4

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(180)]


@dataclass
class Audit:
    """What the SMTP server's log and the result backend say about one chaos run."""

    mails: int
    delivered: int
    dropped: int
    failed: int
    duplicates: int
    lost: int
    over: int
    stuck: int
    deaths: int
    logs: str = ""  # the end of each dead worker's log, to say why it died
    #: Final states that are neither sent, dropped nor failed (state and info), to say why.
    odd: tuple[str, ...] = ()

    def line(self, name: str) -> str:
        return (
            f"chaos {name}: {self.mails} mails, {self.delivered} delivered, {self.dropped} "
            f"dropped, {self.failed} failed; duplicates {self.duplicates}, lost {self.lost}, "
            f"over {self.over}, stuck {self.stuck}, worker deaths {self.deaths}"
        )


class Stack:
    """Broker (Redis or RabbitMQ), limiter-and-ledger Redis (AOF), results Redis, SMTP server
    and two workers."""

    def __init__(self, broker: str = "redis", **settings: str) -> None:
        aof = ("--appendonly", "yes", "--appendfsync", "always")
        self.store = RedisServer(extra_args=aof).start()
        # Results on a Redis no fault touches: the audit reads them while the others fail.
        self.results = RedisServer().start()
        self.broker: RedisServer | RabbitServer
        if broker == "rabbitmq":
            self.broker = RabbitServer().start()
            broker_url = self.broker.url
        else:
            self.broker = RedisServer(extra_args=aof).start()
            broker_url = self.broker.url.rsplit("/", 1)[0] + "/1"
        results = self.results.url.rsplit("/", 1)[0] + "/2"
        self.smtp = SmtpTestServer().start()
        self.env = worker_env(
            self.store.url,
            self.smtp.url,
            MAILGUARD_BROKER_URL=broker_url,
            MAILGUARD_RESULT_BACKEND=results,
            MAILGUARD_LIMITER_URL=self.store.url,
            MAILGUARD_POLICY=POLICY,
            MAILGUARD_MAX_COUNTDOWN="2s",
            MAILGUARD_VISIBILITY_TIMEOUT="8s",
            MAILGUARD_RESTORE_INTERVAL="500ms",
            MAILGUARD_CLAIM_LEASE="3s",
            MAILGUARD_SEND_RETRIES="8",
        )
        self.env.update(settings)
        self.app = client_app(self.env)
        # This process enqueues as a caller's does: with the deployment's settings, so each
        # first message's outbox entry is written before it is published (:func:`load`).
        self.previous = tasks.use_settings(Settings.from_env(self.env))
        self.workers = [CeleryWorker(self.env, name=f"w{n}") for n in (1, 2)]
        self.killed: set[int] = set()
        self.task_ids: list[str] = []  # every mail enqueued (see close)
        self.mail_tasks: dict[str, str] = {}  # the task id of each mail of the load, by mail id
        start_all(self.workers)

    def kill_main(self, index: int) -> float:
        """SIGKILL worker ``index`` (main and children), as a crash would; start a new one.

        Returns the moment of the kill (epoch s), taken before the new worker starts (which
        takes seconds on a loaded machine)."""
        worker = self.workers[index]
        assert worker.process is not None
        self.killed.add(worker.process.pid)
        worker.kill()
        killed = time.time()
        self.workers[index] = CeleryWorker(self.env, name=f"w{index + 1}r").start()
        return killed

    def close(self) -> None:
        # Unsubscribe the client from every result while the results Redis is alive: a result
        # object collected later (a failed test's traceback holds them) would otherwise try to
        # unsubscribe from a server that is gone, and fail whichever test runs then.
        consumer = self.app.backend.result_consumer
        for task_id in self.task_ids:
            with contextlib.suppress(Exception):
                consumer.cancel_for(task_id)
        stop_all(self.workers, timeout=10)
        self.app.close()
        tasks.use_settings(self.previous)
        self.smtp.stop()
        self.broker.cleanup()
        self.store.cleanup()
        self.results.cleanup()


def stacks() -> Iterator[Callable[..., Stack]]:
    """A factory of :class:`Stack` (``broker``, ``MAILGUARD_*`` overrides), each closed after
    the test: ``stack_factory`` here and in ``test_chaos_smtp.py``."""
    made: list[Stack] = []

    def make(broker: str = "redis", **settings: str) -> Stack:
        made.append(Stack(broker, **settings))
        return made[-1]

    yield make
    for stack in reversed(made):  # the settings each put in force restored in turn
        stack.close()


@pytest.fixture
def stack_factory() -> Iterator[Callable[..., Stack]]:
    yield from stacks()


def load(stack: Stack, prefix: str) -> dict[str, AsyncResult[Any]]:
    """Send the load: PER_RECIPIENT mails to each of RECIPIENTS recipients, mail id = subject,
    through ``send_mail.apply_async`` as a caller's process does (its outbox entry first: a
    first message a broker killed before it kept it is published again by the watchdog)."""
    results = {}
    send_mail = stack.app.tasks[TASK]
    for n in range(PER_RECIPIENT):
        for r in range(RECIPIENTS):
            mail_id = f"{prefix}-{r}-{n}"
            results[mail_id] = result = send_mail.apply_async(
                args=[f"user{r}@example.com"],
                kwargs={"subject": mail_id, "body": "chaos", "mail_id": mail_id},
            )
            stack.task_ids.append(result.id)
            stack.mail_tasks[mail_id] = result.id
    return results


def settle(results: dict[str, AsyncResult[Any]], timeout: float) -> dict[str, tuple[str, Any]]:
    """Each mail's final (state, info); mails still unsettled at the deadline keep their state."""
    deadline = time.monotonic() + timeout
    pending = dict(results)
    final: dict[str, tuple[str, Any]] = {}
    while pending and time.monotonic() < deadline:
        for mail_id, result in list(pending.items()):
            if result.state in ("SUCCESS", "FAILURE"):
                final[mail_id] = (result.state, result.info)
                del pending[mail_id]
        time.sleep(0.1)
    for mail_id, result in pending.items():
        final[mail_id] = (result.state, result.info)
    return final


def over_admissions(dues: dict[str, list[float]], policy: Policy) -> int:
    """Windows in which a recipient's slots exceed a tier: an independent recount."""
    over = 0
    for slots in dues.values():
        slots.sort()
        for tier in policy.tiers:
            for i in range(len(slots) - tier.limit):
                if slots[i + tier.limit] - slots[i] < tier.window - 1e-6:
                    over += 1
    return over


def unacked_ids(stack: Stack) -> set[str]:
    """Task ids of the messages the Redis broker records as delivered and not acknowledged
    (kombu's ``unacked`` hash: ``[message, exchange, routing key]`` by delivery tag)."""
    assert isinstance(stack.broker, RedisServer)
    return {str(headers["id"]) for headers in unacked_headers(stack.broker.port)}


def first_messages_recorded(stack: Stack, results: dict[str, AsyncResult[Any]]) -> bool:
    """Whether every mail's first message has run (the mail has a state) or is recorded in the
    broker's ``unacked`` hash (from which only the visibility timeout moves it): none is then
    between the ``BRPOP`` that took it and that record."""
    held = unacked_ids(stack)  # before the states: a message recorded then is recorded still
    return all(r.id in held or r.state != "PENDING" for r in results.values())


def whereabouts(stack: Stack, mail_id: str) -> str:
    """Where the Redis broker keeps a message of the load's mail ``mail_id``: a queue's list,
    ``unacked``, or nowhere (said for a mail left unsettled); "?" on another broker."""
    task_id = stack.mail_tasks.get(mail_id)
    if task_id is None or not isinstance(stack.broker, RedisServer):
        return "?"
    broker = redis.Redis(port=stack.broker.port, db=BROKER_DB)
    try:
        places = [
            repr(key.decode(errors="replace") if isinstance(key, bytes) else key)
            for key in broker.keys("mail*")
            if broker.type(key) == b"list"
            and any(task_id.encode() in item for item in broker.lrange(key, 0, -1))
        ]
        if task_id in unacked_ids(stack):
            places.append("unacked")
    except redis.RedisError as exc:
        return f"broker unreadable: {exc}"
    finally:
        broker.close()
    return "broker: " + (", ".join(places) or "in no queue and not unacked")


def audit(stack: Stack, final: dict[str, tuple[str, Any]]) -> Audit:
    delivered = stack.smtp.delivered
    copies = Counter(d.message["Subject"] for d in delivered)
    outcomes = {
        mail_id: (info.args[0] if isinstance(info, BaseException) and info.args else info)
        for mail_id, (_, info) in final.items()
    }
    statuses = Counter(
        o.get("status") if isinstance(o, dict) else "stuck" for o in outcomes.values()
    )
    lost = sum(
        1
        for mail_id, o in outcomes.items()
        if isinstance(o, dict) and o.get("status") == "sent" and copies[mail_id] == 0
    )
    dues: dict[str, list[float]] = {}
    for mail_id, o in outcomes.items():
        if isinstance(o, dict) and o.get("status") == "sent" and o.get("due") is not None:
            dues.setdefault(mail_id.rsplit("-", 1)[0], []).append(float(o["due"]))
    dead = [
        w
        for w in stack.workers
        if w.process is not None
        and w.process.poll() is not None
        and w.process.pid not in stack.killed
    ]
    return Audit(
        logs="\n".join(f"--- {w.name}:\n{w.log()[-3000:]}" for w in dead),
        mails=len(final),
        delivered=len(copies),
        dropped=statuses["dropped"],
        failed=statuses["failed"],
        duplicates=sum(n - 1 for n in copies.values() if n > 1),
        lost=lost,
        over=over_admissions(dues, Policy.parse(POLICY)),
        stuck=sum(1 for state, _ in final.values() if state not in ("SUCCESS", "FAILURE")),
        deaths=len(dead),
        odd=tuple(
            f"{mail_id}: {final[mail_id][0]} {str(o)[:300]}"
            + (f" ({whereabouts(stack, mail_id)})" if final[mail_id][0] != "SUCCESS" else "")
            for mail_id, o in outcomes.items()
            if not (isinstance(o, dict) and o.get("status") in ("sent", "dropped", "failed"))
        ),
    )


def check(result: Audit, name: str, *, duplicates: int = 0, failed: int = 0) -> None:
    print(result.line(name))
    assert (result.lost, result.over, result.stuck, result.deaths) == (0, 0, 0, 0), (
        f"{result}\n{result.logs}"
    )
    assert result.duplicates == duplicates, result
    assert result.failed == failed, result
    assert result.delivered + result.failed + result.dropped == result.mails, result


def test_pool_children_killed_mid_send(stack_factory: Callable[..., Stack]) -> None:
    """SIGKILL of pool children while mails are being sent: every mail once, none over, but
    for a kill that lands after the server accepted a mail and before its run recorded it
    (the accept-then-drop window): such a mail goes twice, counted and named."""
    stack = stack_factory()
    results = load(stack, "child")
    kills = []
    for _ in range(3):
        time.sleep(0.7)
        stack.workers[0].kill_child()
        kills.append(time.time())
    result = audit(stack, settle(results, 60))
    window = accepted_then_killed(stack, kills)
    print(f"child kills: {window} mail(s) sent twice in the accept-then-drop window")
    check(result, "child kills", duplicates=window)


#: Seconds between a mail's arrival at the server and a kill that cut its run short before its
#: outcome was recorded (the kill lands after the 250; the record is a few ms later).
ACCEPT_THEN_KILL = 1.0


def accepted_then_killed(stack: Stack, kills: list[float]) -> int:
    """Mails delivered twice whose first copy arrived at most :data:`ACCEPT_THEN_KILL` seconds
    before one of ``kills`` (epoch s): the accept-then-drop window, the only duplicates a kill
    may cause."""
    arrivals: dict[str, list[float]] = {}
    for delivered in stack.smtp.delivered:
        arrivals.setdefault(str(delivered.message["Subject"]), []).append(delivered.received_at)
    for subject, times in arrivals.items():
        if len(times) > 1:  # said, so that a failed run tells where its duplicate fell
            offsets = ", ".join(f"{t - kill:+.3f}" for t in sorted(times) for kill in kills)
            print(f"{subject}: {len(times)} copies, arrivals minus kills (s): {offsets}")
    return sum(
        1
        for times in arrivals.values()
        if len(times) > 1 and any(0 <= kill - min(times) <= ACCEPT_THEN_KILL for kill in kills)
    )


def test_a_worker_killed_and_restarted(stack_factory: Callable[..., Stack]) -> None:
    """SIGKILL of a worker's main process mid-run, a new one started: every mail once.

    The kill comes 1 s into the run, and not before every mail's first message has run or is
    recorded in the broker's ``unacked`` hash. A first message that kombu's Redis transport has
    taken (``BRPOP``) and not yet recorded there is gone with a consumer killed in between: the
    caller's only copy, the one loss the product documents as not covered (docs/schedule.md:
    a consumer killed between ``BRPOP`` and its ``unacked`` record; "What is not" covered: a
    mail's first delivery; reliability.md, "The window kombu leaves open"). On a loaded machine
    the first messages were still being taken 1 s in: CI, and one of eleven runs beside a CPU
    hog, lost one that way (PENDING, in no queue and not unacked, for good). What the killed
    worker holds at the kill is covered: first messages in flight or reserved come back after
    the visibility timeout, booked countdowns are published again by the watchdog (or come back
    after the visibility timeout). A kill that lands after the server accepted a mail and before
    its run recorded it sends that mail twice (the accept-then-drop window, as for child kills).
    """
    stack = stack_factory()
    results = load(stack, "main")
    time.sleep(1.0)
    poll(
        lambda: first_messages_recorded(stack, results),
        30,
        "every first message run or recorded unacked",
    )
    killed = stack.kill_main(0)
    result = audit(stack, settle(results, 90))
    # The kill takes the pool children with it: one that had a mail accepted and not yet
    # recorded sends it twice (the accept-then-drop window), counted and named as for child kills.
    window = accepted_then_killed(stack, [killed])
    print(f"main kill: {window} mail(s) sent twice in the accept-then-drop window")
    check(result, "main kill", duplicates=window)


def test_the_limiter_redis_restarted(stack_factory: Callable[..., Stack]) -> None:
    """The limiter-and-ledger Redis killed and restarted (AOF) mid-run: deferred, then sent."""
    stack = stack_factory()
    results = load(stack, "restart")
    time.sleep(1.0)
    stack.store.stop()
    time.sleep(2.0)
    stack.store.start()
    check(audit(stack, settle(results, 90)), "limiter restart")


def test_the_limiter_redis_frozen(stack_factory: Callable[..., Stack]) -> None:
    """The limiter-and-ledger Redis frozen (SIGSTOP) for 3 s mid-run: deferred, then sent.

    With the default 5-minute claim lease: a claim written after a client gave up is taken over
    by the mail's next run, so the freeze delays mails by seconds, not by the lease.
    """
    stack = stack_factory(MAILGUARD_CLAIM_LEASE="5m")
    results = load(stack, "freeze")
    time.sleep(1.0)
    assert stack.store.process is not None
    os.kill(stack.store.process.pid, signal.SIGSTOP)
    time.sleep(3.0)
    os.kill(stack.store.process.pid, signal.SIGCONT)
    check(audit(stack, settle(results, 60)), "limiter freeze")


def test_a_hostile_burst_beside_real_mail(stack_factory: Callable[..., Stack]) -> None:
    """300 hostile calls from another producer beside the load: all dropped, the load intact."""
    stack = stack_factory()
    results = load(stack, "hostile")
    deep: dict[str, Any] = {"leaf": 1}
    for _ in range(400):
        deep = {"x": deep}
    junk: list[dict[str, Any]] = [
        {"context": deep},
        {"subject": "\r\nBcc: x@example.com"},
        {"_progress": {"attempts": -1}},
        {"kind": 7},
        {"mail_id": "{bad}"},
        {"headers": {"X": ["list"]}},
    ]
    hostile = [
        stack.app.send_task(TASK, args=["eve@example.com"], kwargs=junk[n % len(junk)])
        for n in range(300)
    ]
    final = settle(results, 90)
    dropped = settle({str(n): r for n, r in enumerate(hostile)}, 30)
    assert {info["reason"] for _, info in dropped.values()} == {"invalid"}
    check(audit(stack, final), "hostile burst")


def test_the_broker_redis_restarted(stack_factory: Callable[..., Stack]) -> None:
    """The broker's Redis killed and restarted (AOF) while workers hold deferred mails.

    Both workers hold countdown messages when the broker goes away (the case where kombu 5.7.0's
    Redis transport raised ``AttributeError`` while restoring them, and the worker exited); they
    reconnect, and every mail settles once.

    The broker goes away once every mail has run (sent, or held as a countdown that does not
    hop: ``MAX_COUNTDOWN`` 10 s) and its queue is empty. A message popped by a consumer in the
    moment the broker dies is lost by kombu's Redis transport itself (``BRPOP``, then the
    unacked record in a second command: README, Reliability), which no test can make safe.
    """
    stack = stack_factory(MAILGUARD_MAX_COUNTDOWN="10s", MAILGUARD_VISIBILITY_TIMEOUT="15s")
    results = load(stack, "broker")
    broker = redis.Redis(port=stack.broker.port, db=BROKER_DB)

    def all_held() -> bool:
        ran = all(r.state in ("SUCCESS", "DEFERRED") for r in results.values())
        return ran and not any(broker.llen(k) for k in broker.scan_iter("mail*", _type="list"))

    poll(all_held, 30, "every mail run once and the queue empty")
    broker.close()
    stack.broker.stop()
    time.sleep(3.0)
    stack.broker.start()
    check(audit(stack, settle(results, 90)), "broker restart")


def test_the_broker_redis_frozen(stack_factory: Callable[..., Stack]) -> None:
    """The broker's Redis frozen (SIGSTOP) for 3 s while workers hold deferred mails."""
    stack = stack_factory()
    results = load(stack, "bfreeze")
    time.sleep(1.0)
    assert isinstance(stack.broker, RedisServer) and stack.broker.process is not None
    os.kill(stack.broker.process.pid, signal.SIGSTOP)
    time.sleep(3.0)
    os.kill(stack.broker.process.pid, signal.SIGCONT)
    check(audit(stack, settle(results, 90)), "broker freeze")


def test_the_rabbitmq_broker_restarted(stack_factory: Callable[..., Stack]) -> None:
    """The RabbitMQ broker killed and restarted while workers hold deferred mails.

    The queue is durable and the messages persistent; RabbitMQ puts the unacknowledged ones back
    when the workers' connections drop, the workers reconnect, and every mail settles once.
    """
    stack = stack_factory("rabbitmq")
    results = load(stack, "rabbit")
    time.sleep(1.0)
    stack.broker.stop()
    time.sleep(2.0)
    stack.broker.start()
    check(audit(stack, settle(results, 120)), "rabbitmq restart")
