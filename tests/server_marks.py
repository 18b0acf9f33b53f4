"""Which tests need a server, and proof that the others start none.

``tests/conftest.py`` installs the two hooks below. :func:`pytest_collection_modifyitems` marks
every test that needs a real server ``server`` (and ``redis``, the older name), from its
fixtures, its params, its code or its marks, so ``pytest -m "not server"`` (``make test-fast``)
runs the pure tests alone. :func:`pytest_runtest_protocol` runs every test *not* so marked with
the suite's servers forbidden (:func:`servers_forbidden`): a test that starts a redis-server, a
RabbitMQ node, an SMTP server or a Celery worker without the mark fails, naming what it started.
So every run of the fast subset proves it starts no server.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from devservers.celery_worker import CeleryWorker
from devservers.dns_server import DnsServer
from devservers.postfix import PostfixRelay
from devservers.postgrey import Postgrey
from devservers.rabbitmq import RabbitServer
from devservers.redis_servers import RedisClusterServers, RedisSentinel, RedisServer
from devservers.smtp_server import SmtpTestServer
from workers.brokers import inprocess

#: Fixtures that start or hand out a real server. A test that uses one, directly or through
#: another fixture, needs a server.
SERVER_FIXTURES = frozenset(
    {
        "redis_server",
        "redis_url",
        "own_redis",
        "smtp_server",
        "cluster",
        "loose_stack",
        "rabbit",
        "tls_relay",
        "greylisting_relay",
        "anvil_relay",
        "make_relay",
        "dns_server",
    }
)
#: Params naming a backend: a test parametrised over backends needs a server on ``redis``.
BACKEND_PARAMS = frozenset({"memory", "redis"})
#: Code that starts a server itself: a test, or a fixture of its own module, that builds one of
#: the suite's servers (a module-scoped stack, a cluster, a TLS SMTP server, ...) or runs a
#: Celery worker as a subprocess (one that refuses its configuration included).
BUILDS_A_SERVER = re.compile(
    r"\b(?:RedisServer|RedisClusterServers|RedisSentinel|RabbitServer|SmtpTestServer|CeleryWorker"
    r"|PostfixRelay|Postgrey|DnsServer)\("
    r'|"-m",\s*"celery"'
)
#: Code that asks for a server fixture by name (``request.getfixturevalue("redis_url")``): it
#: needs a server unless the test's backend param is ``memory``.
ASKS_FOR_A_SERVER = re.compile(
    r"getfixturevalue\(\s*[\"'](?:" + "|".join(sorted(SERVER_FIXTURES)) + r")[\"']"
)
#: What the fast subset must never start: the suite's server classes (their ``start``), the
#: in-process Celery worker, and the server programs run as subprocesses.
SERVER_STARTS: tuple[tuple[Any, str], ...] = (
    (RedisServer, "start"),
    (RedisClusterServers, "start"),
    (RedisSentinel, "start"),
    (RabbitServer, "start"),
    (SmtpTestServer, "start"),
    (CeleryWorker, "start"),
    (inprocess, "inprocess_worker"),
    (PostfixRelay, "start"),
    (Postgrey, "start"),
    (DnsServer, "start"),
)
SERVER_PROGRAMS = frozenset(
    {"redis-server", "rabbitmq-server", "celery", "postfix", "postgrey", "dnsmasq"}
)


class ServerStarted(AssertionError):
    """A test not marked ``server`` started one (see :func:`servers_forbidden`)."""


def _source(function: object) -> str:
    try:
        return inspect.getsource(function)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return ""


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
    backends = {value for value in params.values() if isinstance(value, str)} & BACKEND_PARAMS
    if "redis" in backends:
        return True
    module = getattr(item, "module", None)
    own_fixtures = [getattr(module, name, None) for name in sorted(names)]
    sources = [
        _source(function)
        for function in (getattr(item, "function", None), *own_fixtures)
        if function is not None
    ]
    if any(BUILDS_A_SERVER.search(source) for source in sources):
        return True
    return "memory" not in backends and any(ASKS_FOR_A_SERVER.search(s) for s in sources)


def _runs_a_server_program(args: object) -> str | None:
    """The server program ``args`` (a Popen argument list) runs, if it runs one."""
    if isinstance(args, (str, bytes, os.PathLike)):
        argv: Sequence[object] = [args]
    elif isinstance(args, Sequence):
        argv = args
    else:
        return None
    words = [os.path.basename(os.fsdecode(a)) for a in argv if isinstance(a, (str, os.PathLike))]
    if words and words[0] in SERVER_PROGRAMS:
        return words[0]
    module = words[words.index("-m") + 1 :][:1] if "-m" in words else []
    if module == ["celery"] and "worker" in words:
        return "celery worker"
    runs_the_cli = module == ["workers.cli"] or words[:1] == ["mailguard"]
    if runs_the_cli and "worker" in words:  # `mailguard demo` is `slow`: a refusal starts none
        return "mailguard worker"
    return None


@contextmanager
def servers_forbidden(test: str) -> Iterator[None]:
    """Inside, starting one of the suite's servers raises :class:`ServerStarted` naming ``test``."""
    patch = pytest.MonkeyPatch()

    def refuse(what: str) -> ServerStarted:
        return ServerStarted(
            f"{test} starts {what} but is not marked `server`: mark it (or use a server "
            "fixture) so `pytest -m 'not server'` stays free of servers"
        )

    def forbidden(owner: Any, name: str) -> Callable[..., Any]:
        def start(*args: object, **kwargs: object) -> Any:
            raise refuse(f"{getattr(owner, '__name__', owner)}.{name}")

        return start

    popen = subprocess.Popen

    class CheckedPopen(popen):  # type: ignore[type-arg,valid-type,misc]
        def __init__(self, args: object, *rest: object, **kwargs: object) -> None:
            program = _runs_a_server_program(args)
            if program is not None:
                raise refuse(program)
            super().__init__(args, *rest, **kwargs)

    try:
        for owner, name in SERVER_STARTS:
            patch.setattr(owner, name, forbidden(owner, name))
        patch.setattr(subprocess, "Popen", CheckedPopen)
        yield
    finally:
        patch.undo()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that needs a server ``server`` and ``redis`` (see pyproject's markers):
    ``pytest -m "not server"`` (or ``-m "not redis"``) runs the fast pure tests alone."""
    for item in items:
        if needs_a_server(item):
            item.add_marker(pytest.mark.server)
            item.add_marker(pytest.mark.redis)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    """Run a test not marked ``server`` (setup, call, teardown) with servers forbidden."""
    if item.get_closest_marker("server") is not None:
        yield
        return
    with servers_forbidden(item.nodeid):
        yield
