"""Fixtures shared by the whole suite: real servers started by the tests themselves."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

import pytest
import redis

from devservers.redis_servers import RedisClusterServers, RedisServer
from devservers.smtp_server import SmtpTestServer, TestCertificate
from mailer import REFERENCE_POLICY, Limiter, ManualClock, Policy
from tests.server_marks import pytest_collection_modifyitems, pytest_runtest_protocol

__all__ = [  # the hooks of tests/server_marks.py, installed for the whole suite
    "pytest_collection_modifyitems",
    "pytest_runtest_protocol",
]


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One redis-server for the session; tests that need a clean one flush it via ``redis_url``."""
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """URL of the session's redis-server, flushed before each test (restarted if it was stopped)."""
    if redis_server.process is None or not redis_server.ping():
        redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    if (outbox := sys.modules.get("workers.outbox.entries")) is not None:
        outbox.close_writers()  # writes of an earlier test, answered (or run again) in this one
    yield redis_server.url


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A private redis-server that a test may stop and restart (outages)."""
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    """A three-node Redis Cluster (no replicas) for the test module: each recipient's key in a
    slot of its own, spread over every node."""
    servers = RedisClusterServers().start()
    yield servers
    servers.cleanup()


@pytest.fixture
def smtp_server() -> Iterator[SmtpTestServer]:
    """A running aiosmtpd server on 127.0.0.1, stopped after the test if still running."""
    server = SmtpTestServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def test_certificate(tmp_path_factory: pytest.TempPathFactory) -> TestCertificate:
    """A self-signed certificate for 127.0.0.1, made once per session with ``openssl``."""
    return TestCertificate.create(tmp_path_factory.mktemp("smtp-tls"))


LimiterFactory = Callable[..., Limiter]


@pytest.fixture(params=["memory", "redis"])
def backend_url(request: pytest.FixtureRequest) -> str:
    """Each shared-suite test runs once per backend: the in-process dict and a real Redis."""
    if request.param == "memory":
        return "memory://"
    return str(request.getfixturevalue("redis_url"))


@pytest.fixture
def clock() -> ManualClock:
    """A clock that moves only when the test says so, starting at a round epoch second."""
    return ManualClock(1_700_000_000.0)


@pytest.fixture
def make_limiter(backend_url: str, clock: ManualClock) -> Iterator[LimiterFactory]:
    """Build limiters on the test's backend with the test's clock; closes them afterwards."""
    made: list[Limiter] = []

    def make(policy: str | Policy = REFERENCE_POLICY, **options: object) -> Limiter:
        if isinstance(policy, str):
            policy = Policy.parse(policy, name="recipient")
        options.setdefault("clock", clock)
        options.setdefault("secret", "test-secret")
        limiter = Limiter.from_url(backend_url, policy, **options)  # type: ignore[arg-type]
        made.append(limiter)
        return limiter

    yield make
    for limiter in made:
        limiter.close()
