"""A worker refuses at start what cannot keep mail and warns, once, of what may lose it: a Redis
Cluster broker, a Redis that may evict keys (``MAILGUARD_ALLOW_EVICTION=on``: warned), a Redis
without persistence, a server whose ``CONFIG`` is renamed, a quorum queue without a delivery
limit. Real redis-servers, a real three-node Cluster and a RabbitMQ node started here; real
workers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Queue

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.rabbitmq import RabbitServer
from devservers.redis_servers import RedisClusterServers, RedisServer
from mailer.redis_fitness import Role, Server, assess, judge
from mailer.settings import Settings
from workers.app import create_app
from workers.brokers.redis_checks import quorum_warnings, redis_form

TASK = "mailguard.send_mail"
PERSISTENCE = "no persistence on"
UNCHECKED = "could not check"


@pytest.fixture
def evicting() -> Iterator[RedisServer]:
    """A redis-server with ``maxmemory-policy volatile-lru`` (several managed services' default)."""
    server = RedisServer(extra_args=("--maxmemory-policy", "volatile-lru")).start()
    yield server
    server.cleanup()


@pytest.fixture
def durable() -> Iterator[RedisServer]:
    """A redis-server with the append-only file on."""
    server = RedisServer(extra_args=("--appendonly", "yes")).start()
    yield server
    server.cleanup()


@pytest.fixture
def no_config() -> Iterator[RedisServer]:
    """A redis-server whose ``CONFIG`` command is renamed away, as managed services do."""
    server = RedisServer(extra_args=("--rename-command", "CONFIG", "")).start()
    yield server
    server.cleanup()


def _refusal(env: dict[str, str]) -> str:
    """The one ``mailguard:`` line a worker that refuses to start writes; it never got ready."""
    worker = CeleryWorker(env, pool="solo", concurrency=1)
    with pytest.raises(RuntimeError, match="did not become ready"):
        worker.start(timeout=30)
    lines = [line for line in worker.log().splitlines() if "mailguard: " in line]
    assert len(lines) == 1, worker.log()[-3000:]
    assert worker.process is not None and worker.process.returncode == 1, worker.log()[-3000:]
    return lines[0]


def _lines(worker: CeleryWorker, marker: str) -> list[str]:
    return [line for line in worker.log().splitlines() if marker in line]


def test_a_worker_refuses_a_redis_that_evicts(evicting: RedisServer) -> None:
    """The broker's and limiter's Redis on ``volatile-lru``: refused in one line naming both
    variables, the server's policy and the fix."""
    line = _refusal(worker_env(evicting.url, "console://"))
    assert "MAILGUARD_BROKER_URL, MAILGUARD_LIMITER_URL" in line, line
    assert "maxmemory-policy volatile-lru" in line
    assert "CONFIG SET maxmemory-policy noeviction" in line
    assert "MAILGUARD_ALLOW_EVICTION=on" in line


def test_a_ledger_that_evicts_is_refused_beside_a_broker_that_does_not(
    redis_url: str, evicting: RedisServer
) -> None:
    """Only the ledger (and the schedule beside it) on an evicting Redis: its variable alone."""
    env = worker_env(redis_url, "console://", MAILGUARD_LEDGER_URL=evicting.url)
    line = _refusal(env)
    assert f"127.0.0.1:{evicting.port} (MAILGUARD_LEDGER_URL) has maxmemory-policy" in line, line
    assert "MAILGUARD_BROKER_URL" not in line


def test_allow_eviction_starts_with_one_warning_and_sends(evicting: RedisServer) -> None:
    """``MAILGUARD_ALLOW_EVICTION=on``: the worker starts, says so once, and sends a mail; the
    server without persistence is warned of once (one line for both variables)."""
    env = worker_env(evicting.url, "console://", MAILGUARD_ALLOW_EVICTION="on")
    worker = CeleryWorker(env, pool="solo", concurrency=1).start()
    app = client_app(env)
    try:
        outcome = app.send_task(TASK, args=["ada@example.com"], kwargs={"subject": "s"})
        assert outcome.get(timeout=30)["status"] == "sent"
    finally:
        worker.stop()
        app.close()
    warned = _lines(worker, "MAILGUARD_ALLOW_EVICTION=on: ")
    assert len(warned) == 1 and "maxmemory-policy volatile-lru" in warned[0], worker.log()
    assert "WARNING" in warned[0]
    assert len(_lines(worker, PERSISTENCE)) == 1, worker.log()
    assert _lines(worker, UNCHECKED) == []


def test_persistence_is_warned_once_and_a_durable_redis_not_at_all(
    redis_url: str, durable: RedisServer
) -> None:
    """The suite's Redis (``appendonly no``, ``save ""``) as broker, an append-only one as
    limiter: one warning, naming only the broker's server."""
    env = worker_env(redis_url, "console://", MAILGUARD_LIMITER_URL=durable.url)
    worker = CeleryWorker(env, pool="solo", concurrency=1).start()
    worker.stop()
    warned = _lines(worker, PERSISTENCE)
    assert len(warned) == 1, worker.log()
    assert "(MAILGUARD_BROKER_URL)" in warned[0] and f":{durable.port}" not in warned[0]
    assert "appendonly no and no RDB save points" in warned[0]


def test_a_renamed_config_command_is_one_warning_not_a_refusal(no_config: RedisServer) -> None:
    """``CONFIG`` renamed away: the policy is still read (``INFO``), the save points cannot be:
    the worker starts with one line saying the check could not be made."""
    worker = CeleryWorker(worker_env(no_config.url, "console://"), pool="solo", concurrency=1)
    worker.start()
    worker.stop()
    unchecked = _lines(worker, UNCHECKED)
    assert len(unchecked) == 1 and "CONFIG is disabled" in unchecked[0], worker.log()
    assert _lines(worker, PERSISTENCE) == []


def test_a_cluster_broker_is_refused_in_either_form(
    redis_url: str, cluster: RedisClusterServers
) -> None:
    """``redis+cluster://`` as the broker, and a ``redis://`` URL to a Cluster node: refused in
    one line naming ``MAILGUARD_BROKER_URL`` and celery#2852."""
    node = cluster.nodes[1]
    for broker in (cluster.url, f"redis://127.0.0.1:{node.port}/0"):
        env = worker_env(redis_url, "console://", MAILGUARD_BROKER_URL=broker)
        line = _refusal(env)
        assert "MAILGUARD_BROKER_URL" in line and "celery#2852" in line, line


def test_the_limiter_on_a_cluster_stays_supported(
    redis_url: str, cluster: RedisClusterServers
) -> None:
    """``MAILGUARD_LIMITER_URL=redis+cluster://``: the worker starts and sends; a plain
    ``redis://`` URL to one of its nodes is refused, naming the form to write."""
    env = worker_env(redis_url, "console://", MAILGUARD_LIMITER_URL=cluster.url)
    worker = CeleryWorker(env, pool="solo", concurrency=1).start()
    app = client_app(env)
    try:
        outcome = app.send_task(TASK, args=["ada@example.com"], kwargs={"subject": "s"})
        assert outcome.get(timeout=30)["status"] == "sent"
    finally:
        worker.stop()
        app.close()
    warned = _lines(worker, PERSISTENCE)
    assert len(warned) == 1 and all(f":{n.port} " in warned[0] for n in cluster.nodes), warned
    plain = f"redis://127.0.0.1:{cluster.nodes[0].port}/0"
    line = _refusal(worker_env(redis_url, "console://", MAILGUARD_LIMITER_URL=plain))
    assert "MAILGUARD_LIMITER_URL points at" in line and "redis+cluster://" in line, line


def test_an_unreachable_store_is_one_warning() -> None:
    """A server that does not answer is not judged: reported as a check not made."""
    found = assess([Role(("MAILGUARD_LEDGER_URL",), "redis://127.0.0.1:1/0")], allow_eviction=False)
    assert found.refusal is None and len(found.warnings) == 1
    assert UNCHECKED in found.warnings[0] and "unreachable" in found.warnings[0]


def test_judge_merges_roles_on_one_server_and_keeps_a_durable_one_quiet() -> None:
    """Two roles on one server (one ``run_id``) make one line; RDB save points are persistence."""
    role_a, role_b = Role(("A",), "redis://h:1/0"), Role(("B",), "redis://h:1/1")
    bare = Server("h:1", "id1", False, "noeviction", False, "")
    found = judge([(role_a, bare), (role_b, bare)], allow_eviction=False)
    assert found.refusal is None and found.warnings == [
        "no persistence on the Redis at h:1 (A, B): appendonly no and no RDB save points, so a "
        "restart of it loses queued and parked mail, claims, outbox entries and bookings; "
        "CONFIG SET appendonly yes (and in its redis.conf) keeps them"
    ]
    snapshots = Server("h:1", "id1", False, "noeviction", False, "3600 1 300 100")
    assert judge([(role_a, snapshots)], allow_eviction=False).warnings == []
    allkeys = Server("h:1", "id1", False, "allkeys-lru", True)
    refusal = judge([(role_a, allkeys)], allow_eviction=False).refusal
    assert refusal is not None and "it deletes queued and parked mail, claims" in refusal


def test_broker_urls_in_redis_pys_form() -> None:
    """kombu's socket and Sentinel forms are read in :func:`mailer.storage.client_from_url`'s;
    other brokers are not Redis."""
    assert redis_form("redis+socket:///run/redis.sock", {}) == "unix:///run/redis.sock"
    sentinel = redis_form("sentinel://127.0.0.1:26379", {"master_name": "mail"})
    assert sentinel == "redis+sentinel://127.0.0.1:26379/mail"
    assert redis_form("amqp://guest@localhost//", {}) is None


def test_a_quorum_queue_without_a_delivery_limit_is_warned() -> None:
    """The queues the app declares are read (AMQP cannot read a declared queue's arguments): a
    quorum queue without ``x-delivery-limit``, or with one at most ``POISON_AFTER``, is warned;
    one above it and a classic queue are not."""
    config = Settings(broker_url="amqp://guest:guest@127.0.0.1:5672//", poison_after=3)

    def warnings_of(**conf: Any) -> list[str]:
        app = create_app(config)
        app.conf.update(conf)
        try:
            return quorum_warnings(config, app)
        finally:
            app.close()

    assert warnings_of() == [], "mailguard's own queue is classic"
    assert warnings_of(task_default_queue_type="quorum") == [], "its queue is declared classic"
    (warned,) = warnings_of(task_queues=None, task_default_queue_type="quorum")
    assert "'mail' is declared with no x-delivery-limit" in warned and "(3)" in warned
    for limit, warned_of in ((3, True), (10, False)):
        arguments = {"x-queue-type": "quorum", "x-delivery-limit": limit}
        found = warnings_of(task_queues=(Queue("mail", queue_arguments=arguments),))
        assert bool(found) is warned_of and all(f"x-delivery-limit {limit}:" in w for w in found)


@pytest.fixture
def rabbit() -> Iterator[RabbitServer]:
    """One RabbitMQ node (3.10 here: quorum queues without a default delivery limit)."""
    server = RabbitServer().start()
    yield server
    server.cleanup()


def test_a_worker_on_a_quorum_queue_without_a_limit_warns_once(
    redis_url: str, rabbit: RabbitServer
) -> None:
    """A project's app whose default queue is quorum (``tests/workers/quorum_app.py``): the
    worker starts, the server holds a quorum queue, and the worker said so in one line."""
    env = worker_env(
        redis_url, "console://", MAILGUARD_BROKER_URL=rabbit.url, MAILGUARD_QUEUE="mail-quorum"
    )
    app_module = "tests.workers.quorum_app"
    worker = CeleryWorker(env, pool="solo", concurrency=1, app_module=app_module).start(60)
    try:
        queues = rabbit.ctl("list_queues", "name", "type", "--no-table-headers", "--quiet")
    finally:
        worker.stop()
    assert "mail-quorum\tquorum" in queues, queues
    warned = _lines(worker, "the quorum queue 'mail-quorum' is declared with no x-delivery-limit")
    assert len(warned) == 1 and "MAILGUARD_POISON_AFTER (3)" in warned[0], worker.log()[-3000:]


def test_allow_eviction_is_read_as_on_or_off() -> None:
    assert Settings.from_env({"MAILGUARD_ALLOW_EVICTION": "on"}).allow_eviction is True
    assert Settings.from_env({}).allow_eviction is False
    with pytest.raises(ValueError, match="MAILGUARD_ALLOW_EVICTION: 'maybe' is not on or off"):
        Settings.from_env({"MAILGUARD_ALLOW_EVICTION": "maybe"})
