"""Which broker transport the app chooses (the broker-restart behaviour is in test_chaos.py)."""

from __future__ import annotations

import pytest
from kombu import Connection

from mailer.settings import Settings
from workers.app import create_app
from workers.broker_transport import SentinelTransport, Transport, transport_for


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:6379/1", "workers.broker_transport:Transport"),
        ("rediss://127.0.0.1:6380/1", "workers.broker_transport:Transport"),
        ("sentinel://127.0.0.1:26379", "workers.broker_transport:SentinelTransport"),
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
        assert conn.transport_cls == "workers.broker_transport:Transport"
        assert isinstance(conn.transport, Transport)
        assert (conn.hostname, conn.port, conn.virtual_host) == ("127.0.0.1", 6390, "3")
    sentinel = create_app(Settings(broker_url="sentinel://127.0.0.1:26390"))
    with sentinel.connection_for_write() as conn:
        assert isinstance(conn.transport, SentinelTransport)
