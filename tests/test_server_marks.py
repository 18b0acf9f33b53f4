"""The fast subset starts no server: every test not marked ``server`` runs with the suite's
servers forbidden (tests/server_marks.py), and that prohibition catches each way a test starts
one, without starting it."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from devservers.celery_worker import CeleryWorker
from devservers.rabbitmq import RabbitServer
from devservers.redis_servers import RedisClusterServers, RedisServer
from devservers.smtp_server import SmtpTestServer
from tests.server_marks import ServerStarted, servers_forbidden
from workers.brokers import inprocess


def test_this_test_runs_with_servers_forbidden() -> None:
    """A test not marked ``server`` (this one) cannot start a redis-server: the hook forbids it."""
    server = RedisServer  # called by another name: a call of the class would mark this test
    with pytest.raises(ServerStarted, match="test_this_test_runs_with_servers_forbidden"):
        server().start()


@pytest.mark.parametrize(
    "server",
    [RedisServer, RedisClusterServers, RabbitServer, SmtpTestServer, CeleryWorker],
    ids=lambda server: server.__name__,
)
def test_each_server_of_the_suite_is_refused(server: type[Any]) -> None:
    """Each server class of devservers refuses to start inside (called unbound: nothing made)."""
    with servers_forbidden("a quick test"), pytest.raises(ServerStarted, match="a quick test"):
        server.start(None)


def test_the_inprocess_worker_is_refused() -> None:
    """The in-process Celery worker (the demo's, the embedded defaults') refuses to start."""
    with servers_forbidden("a quick test"), pytest.raises(ServerStarted, match="a quick test"):
        inprocess.inprocess_worker()


@pytest.mark.parametrize(
    "command",
    [
        ["redis-server", "--port", "0"],
        ["/usr/sbin/rabbitmq-server"],
        [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "--pool", "solo"],
        ["mailguard", "worker"],
        [sys.executable, "-m", "workers.cli", "worker"],
    ],
    ids=[
        "redis-server",
        "rabbitmq-server",
        "celery-worker",
        "mailguard-worker",
        "python-m-cli-worker",
    ],
)
def test_server_programs_are_refused_as_subprocesses(command: list[str]) -> None:
    """Running a server program as a subprocess is refused before anything starts."""
    with servers_forbidden("a quick test"), pytest.raises(ServerStarted, match="a quick test"):
        subprocess.run(command, check=False)


def test_other_subprocesses_run() -> None:
    """Any other program runs as usual inside (the quick tests run the CLI's help, openssl, ...)."""
    with servers_forbidden("a quick test"):
        done = subprocess.run(
            [sys.executable, "-c", "print('ok')"], capture_output=True, check=True
        )
    assert done.stdout.strip() == b"ok"
