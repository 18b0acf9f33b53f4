"""A RabbitMQ node SIGKILLed under load: quorum lanes on a cluster of three nodes keep every mail.

Three RabbitMQ nodes on this machine (:class:`devservers.rabbitmq.RabbitCluster`), the mail on
quorum lanes (``MAILGUARD_QUEUE_TYPE=quorum``), two prefork workers (concurrency 2) whose broker
URL lists start at different nodes (``a;b;c`` and ``b;c;a``: the liveness check takes them for
one broker, by the cluster's name), a tight policy so that mails are deferred (through the
delayed-delivery exchanges) while the fault happens. The first node, where the lanes' leaders
are, is SIGKILLed mid-run; a ``code`` mail is enqueued after the kill behind the backlog. The
audit is the chaos suite's (:func:`tests.reliability.test_chaos.audit`): every mail delivered
once, none lost, none over its recipient's policy by booked slot, none stuck, no worker died;
and the code mail is sent before most of the backlog queued when it was enqueued.

"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery.result import AsyncResult

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.rabbitmq import RabbitCluster
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from mailer.errors import NotEnqueued
from mailer.settings import Settings
from tests.reliability.test_chaos import POLICY, audit, check, settle
from tests.waiting import poll
from workers import tasks
from workers.process import settings as process_settings
from workers.process.liveness import Liveness

TASK = tasks.send_mail.name
RECIPIENTS = 100
PER_RECIPIENT = 3
MAILS = RECIPIENTS * PER_RECIPIENT

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(240)]


class ClusterStack:
    """A RabbitMQ cluster, a limiter-and-ledger Redis (AOF), a results Redis, an SMTP server and
    two workers, each on the cluster's fail-over list from another node. The attributes the
    chaos audit reads: ``smtp``, ``workers``, ``killed``, ``mail_tasks``, ``broker``."""

    def __init__(self) -> None:
        started = time.monotonic()
        self.cluster = RabbitCluster().start()
        self.cluster_seconds = time.monotonic() - started
        self.broker = self.cluster
        self.store = RedisServer(extra_args=("--appendonly", "yes")).start()
        self.results = RedisServer().start()
        self.smtp = SmtpTestServer().start()
        self.env = worker_env(
            self.store.url,
            self.smtp.url,
            MAILGUARD_BROKER_URL=self.cluster.url,
            MAILGUARD_RESULT_BACKEND=self.results.url.rsplit("/", 1)[0] + "/2",
            MAILGUARD_LIMITER_URL=self.store.url,
            MAILGUARD_QUEUE_TYPE="quorum",
            MAILGUARD_POLICY=POLICY,
            MAILGUARD_MAX_COUNTDOWN="2s",
            MAILGUARD_CLAIM_LEASE="3s",
            MAILGUARD_SEND_RETRIES="8",
        )
        self.app = client_app(self.env)
        self.previous = process_settings.use_settings(Settings.from_env(self.env))
        urls = self.cluster.url.split(";")
        self.workers = [
            CeleryWorker(
                {**self.env, "MAILGUARD_BROKER_URL": ";".join(urls[n:] + urls[:n])},
                name=f"w{n + 1}",
            )
            for n in (0, 1)
        ]
        self.killed: set[int] = set()
        self.mail_tasks: dict[str, str] = {}
        for worker in self.workers:
            worker.start()

    def close(self) -> None:
        consumer = self.app.backend.result_consumer
        for task_id in self.mail_tasks.values():
            with contextlib.suppress(Exception):
                consumer.cancel_for(task_id)
        for worker in self.workers:
            worker.stop(timeout=10)
        self.app.close()
        process_settings.use_settings(self.previous)
        self.smtp.stop()
        self.cluster.cleanup()
        self.store.cleanup()
        self.results.cleanup()


@pytest.fixture
def cluster_stack() -> Iterator[ClusterStack]:
    made = ClusterStack()
    yield made
    made.close()


def load(stack: ClusterStack) -> dict[str, AsyncResult[Any]]:
    """PER_RECIPIENT mails to each of RECIPIENTS recipients; mail id = subject."""
    send_mail = stack.app.tasks[TASK]
    results = {}
    for n in range(PER_RECIPIENT):
        for r in range(RECIPIENTS):
            mail_id = f"quorum-{r}-{n}"
            results[mail_id] = result = send_mail.apply_async(
                args=[f"user{r}@example.com"],
                kwargs={"subject": mail_id, "body": "failover", "mail_id": mail_id},
            )
            stack.mail_tasks[mail_id] = result.id
    return results


def enqueue_code(stack: ClusterStack) -> tuple[AsyncResult[Any], int]:
    """The code mail, enqueued as a caller does: ``NotEnqueued`` (the broker out of reach
    within ``MAILGUARD_ENQUEUE_TIMEOUT``) means not enqueued, and calling again is safe."""
    refused = 0
    while True:
        try:
            result = stack.app.tasks[TASK].apply_async(
                args=["ada@example.com"],
                kwargs={"kind": "code", "context": {"code": "493112"}, "mail_id": "code-1"},
            )
        except NotEnqueued:
            refused += 1
            assert refused < 10, "the cluster took no mail for 10 enqueue timeouts"
            continue
        return result, refused


def test_a_rabbitmq_node_killed_under_load(cluster_stack: ClusterStack) -> None:
    """The lanes' leader node SIGKILLed while the load flows: nothing lost, nothing twice, none
    early, the code mail ahead of the backlog, both workers consuming again (no supervisor)."""
    stack = cluster_stack
    assert len(stack.cluster.running()) == 3, "three nodes, one cluster"
    records = Liveness.from_url(stack.store.url, queue="mail")
    assert records is not None
    brokers = {record.broker for record in records.read()}
    assert brokers == {"rabbitmq-cluster:mailguard-test//"}, "two nodes, one broker"
    results = load(stack)
    poll(lambda: len(stack.smtp.delivered) >= 10, 60, "the first mails sent")
    killed_at = time.monotonic()
    stack.cluster.nodes[0].stop()  # SIGKILL: the lanes' leaders were there
    code, refused = enqueue_code(stack)
    enqueued = time.monotonic() - killed_at
    backlog = MAILS - len(stack.smtp.delivered)
    results["Your code"] = code  # its subject: audited with the load
    stack.mail_tasks["Your code"] = code.id
    final = settle(results, 150)
    outcome = code.get(timeout=30)
    order = [d.message["Subject"] for d in stack.smtp.delivered]
    at_kill = MAILS - backlog
    before_code = order.index("Your code") - at_kill
    settled = time.monotonic() - killed_at
    result = audit(stack, final)
    print(
        f"quorum failover: cluster of 3 started in {stack.cluster_seconds:.1f} s "
        f"{stack.cluster.timings}; {MAILS} mails, "
        f"node killed after {at_kill} sent, all settled {settled:.1f} s later; the code mail "
        f"sent after {before_code} of the {backlog} backlog mails (its enqueue refused "
        f"{refused} times, {enqueued:.1f} s after the kill)"
    )
    check(result, "quorum node killed")
    assert outcome["status"] == "sent", outcome
    # No backlog left when the code mail went (the kill came late): nothing to overtake.
    assert backlog == 0 or before_code < backlog / 2, (
        f"the code mail waited for {before_code} of {backlog}"
    )
    assert len(stack.cluster.running()) == 2
    alive = [w for w in stack.workers if w.process is not None and w.process.poll() is None]
    assert len(alive) == 2, "both workers outlived the node"
    connects = [w.log().count("Connected to amqp://") for w in stack.workers]
    print(f"quorum failover: broker connections per worker {connects}")
    assert connects[0] >= 2, "the first node's worker connected again, to another node"
