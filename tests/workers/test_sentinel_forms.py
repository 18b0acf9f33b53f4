"""Every role named behind Sentinel in one form, ``redis+sentinel://h1:p1,h2:p2/service/db``:
the broker and the result backend are given to kombu and Celery in theirs (``sentinel://...;
sentinel://...`` with ``master_name``), with mailguard's Sentinel transport and its socket
options; a bad one is refused in one line; the start checks read the master through the
sentinels (a real sentinel and a real worker)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devservers.celery_worker import CeleryWorker, worker_env
from devservers.redis_servers import RedisSentinel, RedisServer
from mailer.settings import Settings
from workers.app import create_app
from workers.brokers.redis_transport import SOCKET_OPTIONS, sentinel_form
from workers.cli.health import held, queued

URL = "redis+sentinel://:s%40cret@127.0.0.1:26379,[::1]:26380/mail/3"


def test_the_sentinel_form_becomes_kombus_and_celerys() -> None:
    url, options = sentinel_form(URL)
    assert url == "sentinel://:s%40cret@127.0.0.1:26379/3;sentinel://:s%40cret@[::1]:26380/3"
    assert options == {"master_name": "mail"}
    assert sentinel_form("redis://127.0.0.1:6379/1") == ("redis://127.0.0.1:6379/1", {})
    assert sentinel_form("amqp://guest@localhost//") == ("amqp://guest@localhost//", {})


def test_an_app_behind_sentinel_names_the_master_for_broker_and_backend() -> None:
    backend = "redis+sentinel://127.0.0.1:26379/mail/2"
    app = create_app(Settings(broker_url=URL, result_backend=backend))
    assert app.conf.broker_url.startswith("sentinel://:s%40cret@127.0.0.1:26379/3;")
    assert app.conf.broker_transport == "workers.brokers.redis_transport:SentinelTransport"
    options = app.conf.broker_transport_options
    assert options["master_name"] == "mail"
    assert {k: options[k] for k in SOCKET_OPTIONS} == SOCKET_OPTIONS
    assert options["priority_steps"] == list(range(10))
    assert app.conf.result_backend == "sentinel://127.0.0.1:26379/2"
    assert app.conf.result_backend_transport_options == {"master_name": "mail"}
    assert type(app.backend).__name__ == "SentinelBackend"
    app.close()


@pytest.mark.parametrize(
    ("variable", "url"),
    [
        ("BROKER_URL", "redis+sentinel://127.0.0.1:26379"),
        ("RESULT_BACKEND", "redis+sentinel://127.0.0.1:x/mail"),
        ("LIMITER_URL", "redis+sentinel://127.0.0.1:26379/mail/zero"),
    ],
)
def test_a_bad_sentinel_url_is_refused_in_one_line(variable: str, url: str) -> None:
    with pytest.raises(ValueError, match=f"MAILGUARD_{variable} must be redis\\+sentinel://"):
        Settings.from_env({f"MAILGUARD_{variable}": url})


@pytest.fixture
def evicting_behind_sentinel() -> Iterator[RedisSentinel]:
    master = RedisServer(extra_args=("--maxmemory-policy", "allkeys-lru")).start()
    sentinel = RedisSentinel(master).start()
    yield sentinel
    sentinel.cleanup()
    master.cleanup()


def test_a_worker_refuses_a_master_that_evicts_through_the_sentinels(
    evicting_behind_sentinel: RedisSentinel,
) -> None:
    """The broker and the limiter behind Sentinel on a master with ``allkeys-lru``: the start
    check reaches the master through the sentinels and refuses in one line naming both."""
    base = evicting_behind_sentinel.url.rsplit("/", 1)[0]
    env = worker_env(
        f"{base}/0",
        "console://",
        MAILGUARD_BROKER_URL=f"{base}/1",
        MAILGUARD_RESULT_BACKEND=f"{base}/2",
        MAILGUARD_LIMITER_URL=f"{base}/0",
    )
    worker = CeleryWorker(env, pool="solo", concurrency=1)
    with pytest.raises(RuntimeError, match="did not become ready"):
        worker.start(timeout=30)
    lines = [line for line in worker.log().splitlines() if "mailguard: " in line]
    assert len(lines) == 1, worker.log()[-3000:]
    assert "MAILGUARD_BROKER_URL, MAILGUARD_LIMITER_URL" in lines[0], lines[0]
    assert "maxmemory-policy allkeys-lru" in lines[0], lines[0]


@pytest.fixture
def behind_sentinel() -> Iterator[RedisSentinel]:
    master = RedisServer().start()
    sentinel = RedisSentinel(master).start()
    yield sentinel
    sentinel.cleanup()
    master.cleanup()


def test_health_counts_the_queue_behind_sentinel(behind_sentinel: RedisSentinel) -> None:
    """``mailguard health`` counts the mail queue on a ``redis+sentinel://`` broker (every
    priority list) and the messages held, as on a plain Redis."""
    broker = behind_sentinel.url.rsplit("/", 1)[0] + "/1"
    app = create_app(Settings(broker_url=broker))
    try:
        for to in ("ada@example.com", "bob@example.com"):
            app.tasks["mailguard.send_mail"].apply_async(
                args=[to], kwargs={"subject": "s", "body": "b"}
            )
    finally:
        app.close()
    assert queued(broker, "mail") == 2
    assert held(broker, "mail") == 0
