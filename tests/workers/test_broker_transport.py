"""Which broker transport the app chooses (the broker-restart behaviour is in test_chaos.py)."""

from __future__ import annotations

import pytest
from kombu import Connection
from kombu.transport.redis import Mutex

from mailer.settings import Settings
from workers.app import create_app
from workers.brokers.redis_transport import SentinelTransport, Transport, transport_for


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:6379/1", "workers.brokers.redis_transport:Transport"),
        ("rediss://127.0.0.1:6380/1", "workers.brokers.redis_transport:Transport"),
        ("sentinel://127.0.0.1:26379", "workers.brokers.redis_transport:SentinelTransport"),
        ("amqp://guest:guest@127.0.0.1:5672//", None),
        ("memory://", None),
    ],
)
def test_redis_brokers_get_the_contained_transport(url: str, expected: str | None) -> None:
    """Redis and Sentinel brokers use mailguard's transport; others keep kombu's choice."""
    assert transport_for(url) == expected


def test_the_app_connects_through_it_with_the_urls_host_and_db() -> None:
    """The app's broker connection uses the subclass and still reads host, port and db off
    the URL (kombu parses the URL the same way for an explicit transport)."""
    app = create_app(Settings(broker_url="redis://127.0.0.1:6390/3"))
    with app.connection_for_write() as conn:
        assert isinstance(conn, Connection)
        assert conn.transport_cls == "workers.brokers.redis_transport:Transport"
        assert isinstance(conn.transport, Transport)
        assert (conn.hostname, conn.port, conn.virtual_host) == ("127.0.0.1", 6390, "3")
    sentinel = create_app(Settings(broker_url="sentinel://127.0.0.1:26390"))
    with sentinel.connection_for_write() as conn:
        assert isinstance(conn.transport, SentinelTransport)


def test_a_worker_killed_inside_the_restore_sweep_blocks_the_others_30_s_at_most(
    redis_url: str,
) -> None:
    """kombu's restore sweep runs under a lock in the broker; a worker killed inside it leaves
    the lock to expire (kombu's default: 300 s, every other worker's sweep stopped meanwhile).
    The lock the app's channel takes, left behind as a killed sweep leaves it, expires within
    30 s; another sweep in the meantime skips, and one after it runs."""
    app = create_app(Settings(broker_url=redis_url))
    with app.connection_for_write() as conn:
        qos = conn.default_channel.qos
        client = conn.default_channel.client
        held = Mutex(client, qos.unacked_mutex_key, qos.unacked_mutex_expire)
        held.__enter__()  # the killed sweep: entered, never left
        ttl = client.ttl(qos.unacked_mutex_key)
        assert 0 < ttl <= 30
        qos.restore_visible(interval=1)  # another worker's sweep: skips while it is held
        assert client.ttl(qos.unacked_mutex_key) > 0
        client.delete(qos.unacked_mutex_key)  # expired
        qos.restore_visible(interval=1)  # runs, and leaves no lock behind
        assert client.exists(qos.unacked_mutex_key) == 0
