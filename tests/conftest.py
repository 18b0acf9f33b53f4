"""Fixtures shared by the whole suite: real servers started by the tests themselves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.servers import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One redis-server for the session; tests that need a clean one flush it via ``redis_url``."""
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """URL of the session's redis-server, flushed before each test (restarted if a test stopped it)."""
    if redis_server.process is None or not redis_server.ping():
        redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    yield redis_server.url


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A private redis-server that a test may stop and restart (outages)."""
    server = RedisServer().start()
    yield server
    server.cleanup()
