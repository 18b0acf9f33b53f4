"""Fixtures shared by the whole suite: real servers started by the tests themselves."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator

import pytest
import redis

from devservers.redis_servers import RedisServer
from mailer import REFERENCE_POLICY, Limiter, ManualClock, Policy
from tests.smtp_fixtures import smtp_server, test_certificate

__all__ = ["smtp_server", "test_certificate"]  # fixtures shared by the whole suite


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
    yield redis_server.url


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A private redis-server that a test may stop and restart (outages)."""
    server = RedisServer().start()
    yield server
    server.cleanup()


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


# --- markers: which tests need a server ----------------------------------------------------------

#: Fixtures that start or hand out a real server. A test that uses one, directly or through
#: another fixture, needs a server.
SERVER_FIXTURES = frozenset({"redis_server", "redis_url", "own_redis", "smtp_server"})
#: Parametrised fixtures whose listed params start a server (through ``getfixturevalue``).
SERVER_PARAMS = {"backend_url": frozenset({"redis"})}
#: Building one of the suite's servers: a test, or a fixture of its own module, whose code does
#: this starts a server itself (a module-scoped stack, a cluster, a TLS SMTP server, ...).
BUILDS_A_SERVER = re.compile(
    r"\b(?:RedisServer|RedisClusterServers|RedisSentinel|RabbitServer|SmtpTestServer|CeleryWorker)\("
)


def _builds_a_server(function: object) -> bool:
    try:
        source = inspect.getsource(function)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return False
    return BUILDS_A_SERVER.search(source) is not None


def needs_a_server(item: pytest.Item) -> bool:
    """Whether ``item`` needs a real server: by its fixtures, its params, its code or its marks.

    ``slow`` tests count too: each runs the whole stack (``mailguard demo`` starts a Celery
    worker and an SMTP server), and the quick run is meant to take seconds.
    """
    if item.get_closest_marker("server") or item.get_closest_marker("slow"):
        return True
    names = set(getattr(item, "fixturenames", ()))
    if names & SERVER_FIXTURES:
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    if any(params.get(name) in values for name, values in SERVER_PARAMS.items()):
        return True
    module = getattr(item, "module", None)
    own_fixtures = [getattr(module, name, None) for name in sorted(names)]
    return any(
        _builds_a_server(function)
        for function in (getattr(item, "function", None), *own_fixtures)
        if function is not None
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that needs a server ``server`` and ``redis`` (see pyproject's markers):
    ``pytest -m "not server"`` (or ``-m "not redis"``) runs the fast pure tests alone."""
    for item in items:
        if needs_a_server(item):
            item.add_marker(pytest.mark.server)
            item.add_marker(pytest.mark.redis)
