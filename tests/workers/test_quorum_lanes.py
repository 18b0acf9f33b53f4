"""``MAILGUARD_QUEUE_TYPE=quorum``: the lanes' declarations and routing, the start check, and on a
real RabbitMQ node a code mail ahead of a newsletter backlog, a deferred mail through Celery's
delayed delivery, and a mail over the delivery limit kept in the dead-letter queue."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from kombu import Connection

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.ports import free_port
from devservers.rabbitmq import RabbitServer
from devservers.smtp_server import SmtpTestServer
from mailer.records.schedule import MemorySchedule
from mailer.settings import Settings
from workers import tasks
from workers.app import create_app
from workers.brokers import quorum, routing
from workers.brokers.cluster import cluster_identity, worker_broker
from workers.brokers.redis_checks import quorum_warnings
from workers.polling.outbox_watch import OutboxWatch
from workers.polling.promoter import Promoter
from workers.process import settings as process_settings
from workers.process.liveness import WorkerRecord, conflict
from workers.waiting.payload import Parked

TASK = tasks.send_mail.name
AMQP = "amqp://guest:guest@127.0.0.1:5999//"


def _settings(**env: str) -> Settings:
    return Settings.from_env({"MAILGUARD_BROKER_URL": AMQP, **env})


def test_a_mail_goes_to_its_prioritys_lane() -> None:
    """9 to ``.p9``; 5-8 (default, a deferred default) to ``.p5``; 0-4 to ``.p0``."""
    lanes = {level: quorum.lane_queue("mail", level) for level in range(10)}
    assert lanes == {
        **dict.fromkeys(range(5), "mail.p0"),
        **dict.fromkeys(range(5, 9), "mail.p5"),
        9: "mail.p9",
    }
    assert quorum.lane_queue("mail", None) == "mail.p5"
    app = create_app(_settings(MAILGUARD_QUEUE_TYPE="quorum"))
    routed = {p: app.amqp.router.route({"priority": p}, TASK, (), {}, None) for p in (9, 5, 0)}
    assert {p: r["queue"].name for p, r in routed.items()} == {
        9: "mail.p9",
        5: "mail.p5",
        0: "mail.p0",
    }
    assert routing.mail_queue(app, "mail") == "mail", "the outbox's and schedule's queue"
    assert routing.mail_queues(app, "mail") == ("mail.p9", "mail.p5", "mail.p0")


def test_quorum_lanes_are_declared_as_celery_needs_them() -> None:
    """Quorum queues with confirms, a delivery limit above POISON_AFTER that the start check
    (``workers.brokers.redis_checks``) accepts, a dead-letter target; classic is unchanged."""
    config = _settings(MAILGUARD_QUEUE_TYPE="quorum", MAILGUARD_POISON_AFTER="4")
    app = create_app(config)
    queues = list(app.amqp.queues.values())
    assert [q.name for q in queues] == ["mail.p9", "mail.p5", "mail.p0"]
    for queue in queues:
        assert queue.queue_arguments == {
            "x-queue-type": "quorum",
            "x-delivery-limit": 9,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "mail.dead",
        }
        assert (queue.exchange.name, queue.exchange.type) == ("mail.lanes", "topic")
    assert app.conf.broker_transport_options["confirm_publish"] is True
    assert app.conf.worker_detect_quorum_queues is True
    assert quorum_warnings(config, app) == [], "the brokercheck accepts the lanes"
    classic = create_app(_settings())
    assert [q.name for q in classic.amqp.queues.values()] == ["mail"]
    assert "confirm_publish" not in classic.conf.broker_transport_options
    redis = create_app(_settings(MAILGUARD_QUEUE_TYPE="quorum", MAILGUARD_BROKER_URL="redis://h"))
    assert [q.name for q in redis.amqp.queues.values()] == ["mail"], "quorum is RabbitMQ's"


def test_a_bad_queue_type_is_refused_in_one_line() -> None:
    with pytest.raises(
        ValueError, match=r"^MAILGUARD_QUEUE_TYPE must be classic or quorum, got 'stream'$"
    ):
        _settings(MAILGUARD_QUEUE_TYPE="stream")


def test_a_worker_left_without_a_lane_is_refused() -> None:
    """``-Q mail.p9,mail.p5`` leaves the lowest lane out: one line naming it."""
    app = create_app(_settings(MAILGUARD_QUEUE_TYPE="quorum"))
    app.amqp.queues.select(["mail.p9", "mail.p5"])
    worker = SimpleNamespace(app=app)
    with pytest.raises(SystemExit, match=r"does not consume the queue 'mail.p0'.*-Q "):
        routing.consume_mail_queue(worker, TASK, "mail")
    app.amqp.queues.select(["mail.p9", "mail.p5", "mail.p0"])
    routing.consume_mail_queue(worker, TASK, "mail")  # all three: accepted


def test_the_nodes_of_one_cluster_are_one_broker() -> None:
    a = cluster_identity("prod", "amqp://u:p@node-a:5672/mail")
    assert (
        a
        == cluster_identity("prod", "pyamqp://u:q@node-b:5673/mail")
        == ("rabbitmq-cluster:prod/mail")
    )
    assert a != cluster_identity("prod", "amqp://u:p@node-a:5672/other")
    assert a != cluster_identity("staging", "amqp://u:p@node-a:5672/mail")


@pytest.fixture(scope="module")
def rabbit() -> Iterator[RabbitServer]:
    server = RabbitServer().start()
    yield server
    server.cleanup()


def test_a_worker_named_by_address_beside_one_named_by_cluster() -> None:
    """A running worker whose record names the node by its address (no cluster name read, or an
    older version) is beside this one when the address is this one's first node; another
    node's address is another broker (to the check: it cannot know that node's cluster)."""
    me = WorkerRecord("me", "rabbitmq-cluster:prod/mail", started=1.0, seen=1.0)
    on_a = WorkerRecord("a", "amqp://node-a:5672/mail", started=1.0, seen=1.0)
    on_b = WorkerRecord("b", "amqp://node-b:5672/mail", started=1.0, seen=1.0)
    assert conflict([me, on_a], me, 2.0, also="amqp://node-a:5672/mail") is None
    assert conflict([me, on_a, on_b], me, 2.0, also="amqp://node-a:5672/mail") == on_b


def test_a_broker_without_a_cluster_name_is_named_by_its_address() -> None:
    """Redis, and a RabbitMQ node that cannot be asked (logged), keep the address identity."""
    redis_app = create_app(Settings.from_env({"MAILGUARD_BROKER_URL": "redis://h:6379/1"}))
    assert worker_broker(redis_app) == "redis://h:6379/1"
    down = create_app(
        _settings(MAILGUARD_BROKER_URL=f"amqp://guest:guest@127.0.0.1:{free_port()}//")
    )
    assert worker_broker(down).startswith("amqp://localhost:")
    down.close()


@pytest.fixture
def enqueue_with() -> Iterator[None]:
    """Restores the settings a test puts in force in this process (``send_mail`` checks a
    call's kind with them)."""
    previous = process_settings.current()
    yield
    process_settings.use_settings(previous)


def _env(
    rabbit: RabbitServer, redis_url: str, smtp: SmtpTestServer, **extra: str
) -> dict[str, str]:
    return worker_env(
        redis_url,
        smtp.url,
        MAILGUARD_BROKER_URL=rabbit.url,
        MAILGUARD_QUEUE=f"mail-{uuid.uuid4().hex[:8]}",
        MAILGUARD_QUEUE_TYPE="quorum",
        MAILGUARD_KIND_NEWSLETTER_PRIORITY="0",
        **extra,
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.usefixtures("enqueue_with")
def test_a_code_mail_goes_ahead_of_a_newsletter_backlog(
    rabbit: RabbitServer, redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """50 newsletter mails, then one code mail, queued before the worker (2 processes) starts:
    the code mail is among the first mails sent (the lanes' promise: it waits only for the
    mails the worker holds, at most its concurrency per lane), not behind the backlog."""
    env = _env(rabbit, redis_url, smtp_server, MAILGUARD_POLICY="100/1s")
    app = client_app(env)
    process_settings.use_settings(Settings.from_env(env))
    send_mail = app.tasks[TASK]
    results = [
        send_mail.apply_async(
            args=[f"reader{n}@example.com"],
            kwargs={"kind": "newsletter", "subject": f"news {n}", "body": "b"},
        )
        for n in range(50)
    ]
    results.append(
        send_mail.apply_async(
            args=["ada@example.com"], kwargs={"kind": "code", "context": {"code": "493112"}}
        )
    )
    queued = json.loads(
        rabbit.ctl("list_queues", "name", "type", "messages", "--formatter", "json")
    )
    lanes = {
        q["name"].rsplit(".", 1)[-1]: (q["type"], q["messages"])
        for q in queued
        if q["name"].startswith(env["MAILGUARD_QUEUE"] + ".p")
    }
    worker = CeleryWorker(env).start()
    try:
        outcomes = [r.get(timeout=60) for r in results]
        order = [d.message["Subject"] for d in smtp_server.delivered]
    finally:
        worker.kill()
        app.close()
    assert {lane: kind for lane, (kind, _) in lanes.items()} == {"p9": "quorum", "p0": "quorum"}
    assert [o["status"] for o in outcomes] == ["sent"] * 51
    before = order.index("Your code")
    print(f"quorum lanes: the code mail was sent after {before} of 50 newsletter mails")
    assert before <= 4, f"the code mail waited behind {before} newsletter mails: {order[:10]}"


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.usefixtures("enqueue_with")
def test_a_deferred_mail_waits_in_the_delayed_delivery(
    rabbit: RabbitServer, redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """Two mails to one reader under ``1/2s``: the second is deferred (a countdown, through
    Celery's delayed-delivery exchanges) and sent once, not before its booked slot."""
    env = _env(rabbit, redis_url, smtp_server, MAILGUARD_POLICY="1/2s")
    app = client_app(env)
    process_settings.use_settings(Settings.from_env(env))
    send_mail = app.tasks[TASK]
    worker = CeleryWorker(env).start()
    try:
        results = [
            send_mail.apply_async(
                args=["ada@example.com"], kwargs={"subject": f"s{n}", "body": "b"}
            )
            for n in (1, 2)
        ]
        outcomes = [r.get(timeout=60) for r in results]
        delivered = sorted(d.received_at for d in smtp_server.delivered)
    finally:
        worker.kill()
        app.close()
    assert [o["status"] for o in outcomes] == ["sent", "sent"], outcomes
    assert sorted(o["deferrals"] for o in outcomes) == [0, 1]
    assert len(delivered) == 2
    dues = sorted(float(o["due"]) for o in outcomes)
    assert dues[1] - dues[0] >= 2.0 - 1e-6, "the booked slots keep the policy"


def test_a_mail_over_the_delivery_limit_is_dead_lettered(rabbit: RabbitServer) -> None:
    """A message requeued more often than the lane's ``x-delivery-limit`` lands in
    ``<queue>.dead``, where it is kept (no consumer), not dropped."""
    config = _settings(
        MAILGUARD_BROKER_URL=rabbit.url,
        MAILGUARD_QUEUE=f"mail-{uuid.uuid4().hex[:8]}",
        MAILGUARD_QUEUE_TYPE="quorum",
        MAILGUARD_POISON_AFTER="1",
    )
    app = create_app(config)
    quorum.declare_dead_letters(app, config)
    lane = quorum.lane_queues(config)[0]
    with Connection(rabbit.url) as connection:
        channel = connection.default_channel
        bound = lane.bind(channel)
        bound.declare()
        producer = connection.Producer(channel)
        producer.publish({"n": 1}, exchange=lane.exchange, routing_key=lane.routing_key)
        dead = quorum.dead_letters(config).bind(channel)
        deliveries, kept = 0, None
        deadline = time.monotonic() + 30
        while kept is None and time.monotonic() < deadline:
            message = bound.get()
            if message is not None:
                deliveries += 1
                message.requeue()  # a failed delivery: RabbitMQ counts it
            else:
                kept = dead.get()  # committed by the queue's Raft log: a moment later
                time.sleep(0.05)
        payload = getattr(kept, "payload", None)
    app.close()
    assert deliveries == quorum.delivery_limit(config) + 1 == 7
    assert payload == {"n": 1}


def test_the_promoter_publishes_a_parked_mail_to_its_lane(rabbit: RabbitServer) -> None:
    """Parked mails promoted (and the watchdog's copies, the same publish) go to the lane of
    their next run's priority: a code mail to ``.p9``, a default one (6) to ``.p5``; the
    watchdog counts the messages of every lane."""
    env = {
        "MAILGUARD_BROKER_URL": rabbit.url,
        "MAILGUARD_QUEUE": f"mail-{uuid.uuid4().hex[:8]}",
        "MAILGUARD_QUEUE_TYPE": "quorum",
    }
    config = Settings.from_env(env)
    app = create_app(config)
    with app.connection_for_write() as connection:
        for lane in quorum.lane_queues(config):
            lane.bind(connection.default_channel).declare()
    schedule = MemorySchedule()
    kinds = {"m0": "code", "m1": "default", "m2": "default"}
    for mail_id, kind in kinds.items():
        payload = Parked(mail_id, ["r@example.com"], {"mail_id": mail_id, "kind": kind}, 0.0)
        schedule.park(mail_id, time.time() - 1, payload.encode())
    promoter = Promoter(app, schedule, config)
    watch = OutboxWatch(promoter, None, 10.0, routing.mail_queue(app, config.queue))  # type: ignore[arg-type]
    try:
        assert promoter.promote_once() == 3
        with app.connection_for_write() as connection:
            counts = {
                lane.name.rsplit(".", 1)[-1]: int(
                    lane.bind(connection.default_channel).queue_declare(passive=True).message_count
                )
                for lane in quorum.lane_queues(config)
            }
        size = watch.queue_size()
    finally:
        watch.close()
        promoter.stop()
        app.close()
    assert counts == {"p9": 1, "p5": 2, "p0": 0}
    assert size == 3
