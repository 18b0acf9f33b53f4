"""The outbox entry rides in the broker's publish when the broker is the ledger's Redis server
(:mod:`workers.outbox.ride`): one write carries the entry's script and the ``LPUSH``, the entry
first. A real Redis (broker db 1, ledger db 0), no worker; commands counted with ``INFO
commandstats``, which do not depend on the machine."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
import redis

from devservers.celery_worker import client_app, worker_env
from devservers.redis_servers import RedisServer
from mailer.factory import outbox_url
from mailer.records.outbox import RedisOutbox
from mailer.settings import Settings
from workers import tasks
from workers.outbox import entries as outbox
from workers.outbox import ride as outbox_ride

pytestmark = [pytest.mark.redis]

TRANSPORT = "workers.brokers.redis_transport:Transport"


def _env(redis_url: str, **extra: str) -> dict[str, str]:
    return worker_env(redis_url, "smtp://127.0.0.1:1", MAILGUARD_OUTBOX_GRACE="1s", **extra)


@pytest.fixture
def server(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _calls(server: redis.Redis, command: str) -> int:
    return int(server.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def _send(
    env: dict[str, str], mail_ids: list[str], between: Callable[[], None] = lambda: None
) -> RedisOutbox:
    """``send_mail.apply_async`` of each mail through an app on ``env`` (``between`` called
    after the first: its connections are open then); the outbox."""
    previous = tasks.use_settings(Settings.from_env(env))
    app = client_app(env)
    try:
        send_mail = app.tasks[tasks.send_mail.name]
        for n, mail_id in enumerate(mail_ids):
            call = {"subject": mail_id, "body": "x", "mail_id": mail_id}
            send_mail.apply_async(args=[f"{mail_id}@example.com"], kwargs=call, ignore_result=True)
            if n == 0:
                between()
        box = outbox.outbox_for(tasks.settings)
        assert isinstance(box, RedisOutbox)
        box.settle()
        return box
    finally:
        app.close()
        tasks.use_settings(previous)


def _entries(box: RedisOutbox) -> set[str]:
    return {key.decode() for key in box.client.hkeys(box.payloads_key)}


def test_the_entry_rides_in_the_publish() -> None:
    """Given the broker on the ledger's server (another database), when 6 mails are enqueued,
    then each entry is in the outbox (in the broker's database) and each message queued, and
    after the first (which opens the connections) every put went in the publish's write: one
    script call a mail, no ``SELECT``, and no write of the outbox's own (its writer never
    connected). A redis-server of the test's own: nothing else runs commands there."""
    own = RedisServer().start()
    server = redis.Redis.from_url(own.url)
    try:
        env = _env(own.url)
        seen: dict[str, int] = {}

        def count() -> None:
            seen.update(select=_calls(server, "select"), evalsha=_calls(server, "evalsha"))

        box = _send(env, [f"ride-{n}" for n in range(6)], between=count)
        assert _entries(box) >= {f"ride-{n}" for n in range(6)}
        assert box.server["db"] == 1
        assert _calls(server, "select") - seen["select"] == 0
        assert _calls(server, "evalsha") - seen["evalsha"] == 5
        assert box._later is not None and box._later._connection is None, "no put of its own"
        broker = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
        try:
            queued = sum(broker.llen(key) for key in broker.scan_iter("mail*", _type="list"))
        finally:
            broker.close()
        assert queued == 6
    finally:
        server.close()
        own.stop()


def test_an_entry_whose_script_the_server_lost_is_written_all_the_same(
    redis_url: str, server: redis.Redis
) -> None:
    """Given a server that lost its scripts (``SCRIPT FLUSH``, as after a restart), when a mail
    is enqueued, then its entry is written (the script loaded again) and its message queued."""
    env = _env(redis_url)
    _send(env, ["warm-1"])
    server.script_flush()
    box = _send(env, ["lost-1"])
    assert "lost-1" in _entries(box)


def test_no_ride_to_another_server_the_entry_is_written_first(redis_url: str) -> None:
    """Given a broker URL that names the server otherwise (``localhost``: mailguard cannot tell
    it is the same server), when a mail is enqueued, then no ride is offered and the entry is
    written by the outbox's own connection, before the publish."""
    env = _env(redis_url)
    env["MAILGUARD_BROKER_URL"] = env["MAILGUARD_BROKER_URL"].replace("127.0.0.1", "localhost")
    box = _send(env, ["apart-1"])
    assert "apart-1" in _entries(box)


@pytest.mark.parametrize(
    ("broker", "transport", "ledger", "rides"),
    [
        ("redis://127.0.0.1:6390/1", TRANSPORT, "redis://127.0.0.1:6390/0", True),
        ("redis://127.0.0.1:6390/0", TRANSPORT, "redis://127.0.0.1:6390", True),
        ("redis://127.0.0.1:6379/1", TRANSPORT, "redis://127.0.0.1/0", True),
        ("redis://127.0.0.1:6390/1", TRANSPORT, "redis://127.0.0.1:6391/1", False),
        ("redis://127.0.0.1:6390/1", TRANSPORT, "redis://localhost:6390/1", False),
        ("redis://:a@127.0.0.1:6390/1", TRANSPORT, "redis://:b@127.0.0.1:6390/1", False),
        ("redis://u:a@127.0.0.1:6390/1", TRANSPORT, "redis://:a@127.0.0.1:6390/1", False),
        ("rediss://127.0.0.1:6390/1", TRANSPORT, "redis://127.0.0.1:6390/1", False),
        ("redis://127.0.0.1:6390/1", "redis", "redis://127.0.0.1:6390/0", False),
        ("sentinel://127.0.0.1:26379", TRANSPORT, "redis://127.0.0.1:26379/0", False),
        ("amqp://127.0.0.1:5672//", TRANSPORT, "redis://127.0.0.1:5672/0", False),
    ],
)
def test_a_ride_only_to_the_same_server_and_user(
    broker: str, transport: str, ledger: str, rides: bool
) -> None:
    """Only mailguard's Redis transport, one host and port, one user and password, one
    scheme: a database of its own is fine (``SELECT``)."""
    assert outbox_ride.possible(broker, transport, ledger) is rides


def test_a_publish_without_a_ride_offered_is_kombus(redis_url: str) -> None:
    """Outside ``apply_async`` (no ride offered), the transport publishes as kombu does."""
    assert outbox_ride.current() is None
    ride = outbox_ride.ride_for(("PING",), {"host": "127.0.0.1"})
    with outbox_ride.riding(ride):
        assert outbox_ride.current() is ride
        ride.sent = True
        assert outbox_ride.current() is None, "a ride goes once"
    assert outbox_ride.current() is None


def test_a_ledger_database_the_server_refuses_does_not_fail_the_publish(
    redis_url: str, server: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Given a ledger URL naming, in its query, a database the server does not have (a mistake;
    a database in the query keeps the outbox there, so the ride selects it), when a mail is
    enqueued, then the ride's ``SELECT`` is refused, the message is queued all the same
    (``apply_async`` returns) and the missing entry is logged: the mail goes without one."""
    env = _env(redis_url, MAILGUARD_LEDGER_URL=redis_url.rsplit("/", 1)[0] + "/?db=99")
    with caplog.at_level(logging.WARNING, logger="mailguard"):
        previous = tasks.use_settings(Settings.from_env(env))
        app = client_app(env)
        try:
            send_mail = app.tasks[tasks.send_mail.name]
            call = {"subject": "s", "body": "x", "mail_id": "nodb-1"}
            send_mail.apply_async(args=["nodb-1@example.com"], kwargs=call, ignore_result=True)
        finally:
            app.close()
            tasks.use_settings(previous)
    broker = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
    try:
        assert sum(
            broker.llen(key)
            for key in broker.scan_iter("mail*", _type="list")
            if key.count(b":") == 0
        )
    finally:
        broker.close()
    assert "outbox" in caplog.text


@pytest.mark.parametrize(
    ("broker", "ledger", "outbox_at"),
    [
        ("redis://127.0.0.1:6390/1", "redis://127.0.0.1:6390/0", "redis://127.0.0.1:6390/1"),
        (
            "redis://:pw@127.0.0.1:6390/1",
            "redis://:pw@127.0.0.1:6390/0",
            "redis://:pw@127.0.0.1:6390/1",
        ),
        (
            "rediss://127.0.0.1:6390/1",
            "rediss://127.0.0.1:6390/0?ssl_cert_reqs=none",
            "rediss://127.0.0.1:6390/1?ssl_cert_reqs=none",
        ),
        ("redis://127.0.0.1:6390/0", "redis://127.0.0.1:6390", "redis://127.0.0.1:6390"),
        ("redis://127.0.0.1:6390/1", "redis://127.0.0.1:6391/0", "redis://127.0.0.1:6391/0"),
        (
            "redis://:a@127.0.0.1:6390/1",
            "redis://:b@127.0.0.1:6390/0",
            "redis://:b@127.0.0.1:6390/0",
        ),
        (
            "redis://127.0.0.1:6390/1",
            "redis://127.0.0.1:6390/?db=0",
            "redis://127.0.0.1:6390/?db=0",
        ),
        ("sentinel://127.0.0.1:26379", "redis://127.0.0.1:26379/0", "redis://127.0.0.1:26379/0"),
        ("amqp://127.0.0.1:5672//", "redis://127.0.0.1:5672/0", "redis://127.0.0.1:5672/0"),
        (
            "redis://127.0.0.1:6390/1;redis://127.0.0.1:6391/1",
            "redis://127.0.0.1:6390/0",
            "redis://127.0.0.1:6390/0",
        ),
    ],
)
def test_the_outbox_lives_in_the_brokers_database_on_the_ledgers_server(
    broker: str, ledger: str, outbox_at: str
) -> None:
    """A plain Redis broker on the ledger's server, as the same user: the outbox in the
    broker's database (the ledger's URL otherwise: another server or user, Sentinel, AMQP, a
    failover list, or a database named in the query), whatever transport an app uses."""
    settings = Settings.from_env({"MAILGUARD_BROKER_URL": broker, "MAILGUARD_LEDGER_URL": ledger})
    assert outbox_url(settings) == outbox_at
