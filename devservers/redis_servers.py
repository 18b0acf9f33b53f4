"""Real Redis servers the tests and benchmarks start, stop and restart themselves.

A single ``redis-server``, a three-node cluster, sentinels (with replicas for a failover).
Neither the suite nor the benchmarks rely on a server already running on the machine. If
``redis-server`` cannot be started the fixture fails the test (it never skips): a missing server
is a broken environment.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from devservers.ports import cluster_port, free_port


class RedisServer:
    """A throwaway ``redis-server`` on 127.0.0.1, no persistence, that can be stopped and restarted.

    The port stays the same across restarts so that clients built from ``url`` reconnect.
    """

    def __init__(self, port: int | None = None, extra_args: tuple[str, ...] = ()) -> None:
        self.port = port or free_port()
        self.extra_args = extra_args
        self.dir = Path(tempfile.mkdtemp(prefix="mailguard-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed: run `sh .ci/install-redis` (apt-get install "
                "redis-server); the test suite needs a real server and never skips without one"
            )
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
                "--logfile",
                str(self.dir / "redis.log"),
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if self.ping():
                return self
            time.sleep(0.02)
        log = (
            (self.dir / "redis.log").read_text(errors="replace")[-2000:]
            if (self.dir / "redis.log").exists()
            else ""
        )
        self.stop()
        raise RuntimeError(f"redis-server on port {self.port} did not start:\n{log}")

    def ping(self) -> bool:
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock,
        ):
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
        return False

    def stop(self) -> None:
        """Stop the server at once (SIGKILL), as an outage would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisClusterServers:
    """Three cluster-enabled redis-servers joined into one Redis Cluster (no replicas)."""

    def __init__(self) -> None:
        self.nodes = [
            RedisServer(
                cluster_port(),
                extra_args=("--cluster-enabled", "yes", "--cluster-node-timeout", "2000"),
            )
            for _ in range(3)
        ]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def start(self, timeout: float = 20.0) -> RedisClusterServers:
        try:
            return self._start(timeout)
        except BaseException:
            self.cleanup()  # never leave half a cluster running
            raise

    def _start(self, timeout: float) -> RedisClusterServers:
        for node in self.nodes:
            node.start()
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{node.port}" for node in self.nodes),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=timeout,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = [
                subprocess.run(
                    ["redis-cli", "-p", str(node.port), "cluster", "info"],
                    capture_output=True,
                    text=True,
                    timeout=5,
                    check=False,
                ).stdout
                for node in self.nodes
            ]
            if all("cluster_state:ok" in state for state in states):
                return self
            time.sleep(0.1)
        raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()


class RedisSentinel:
    """Sentinels watching ``master`` under the service name ``service`` (``mymaster``), with
    ``replicas`` redis-servers replicating it: by default one sentinel and no replica.

    ``RedisSentinel(master, replicas=1, sentinels=3)`` is a failover deployment: a quorum of
    two, ``down_after_ms`` (1000) before a master is judged down and ``failover_timeout_ms``
    (3000) for a failover, every server on a loopback port of :func:`free_port`. ``master``
    must be started; :meth:`start` starts the replicas (and waits until they are in sync),
    then the sentinels. Each is stopped by its process (SIGKILL); :meth:`kill_master` kills
    whichever server the sentinels name as master now.
    """

    def __init__(
        self,
        master: RedisServer,
        service: str = "mymaster",
        *,
        replicas: int = 0,
        sentinels: int = 1,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
    ) -> None:
        self.master = master
        self.service = service
        self.replicas = [
            RedisServer(extra_args=("--replicaof", "127.0.0.1", str(master.port)))
            for _ in range(replicas)
        ]
        self.sentinels = [RedisServer() for _ in range(sentinels)]
        quorum = sentinels // 2 + 1
        for server in self.sentinels:
            (server.dir / "sentinel.conf").write_text(
                f"port {server.port}\nbind 127.0.0.1\ndir {server.dir}\n"
                f"sentinel monitor {service} 127.0.0.1 {master.port} {quorum}\n"
                f"sentinel down-after-milliseconds {service} {down_after_ms}\n"
                f"sentinel failover-timeout {service} {failover_timeout_ms}\n"
                f"sentinel parallel-syncs {service} 1\n"
            )
        self.server = self.sentinels[0]  # the one sentinel of the single form
        self.config = self.server.dir / "sentinel.conf"

    @property
    def hosts(self) -> str:
        """Every sentinel's ``host:port``, comma-separated (the ``redis+sentinel://`` netloc)."""
        return ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)

    @property
    def url(self) -> str:
        return f"redis+sentinel://{self.hosts}/{self.service}/0"

    def start(self, timeout: float = 20.0) -> RedisSentinel:
        try:
            return self._start(timeout)
        except BaseException:
            self.cleanup()  # never leave half a deployment running
            raise

    def _start(self, timeout: float) -> RedisSentinel:
        for replica in self.replicas:
            replica.start()
        deadline = time.monotonic() + timeout
        while self.replicas and not self._in_sync():
            if time.monotonic() > deadline:
                raise RuntimeError("the replicas did not reach master_link_status:up")
            time.sleep(0.05)
        binary = shutil.which("redis-server")
        assert binary is not None
        for server in self.sentinels:
            server.process = subprocess.Popen(
                [
                    binary,
                    str(server.dir / "sentinel.conf"),
                    "--sentinel",
                    "--logfile",
                    str(server.dir / "s.log"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        while not all(s.ping() for s in self.sentinels):
            if time.monotonic() > deadline:
                raise RuntimeError("redis sentinel did not start")
            time.sleep(0.05)
        while self.replicas and not self._replicas_seen():
            if time.monotonic() > deadline:
                raise RuntimeError("the sentinels did not discover the replicas")
            time.sleep(0.1)
        return self

    def _in_sync(self) -> bool:
        return all(
            "master_link_status:up" in self._cli(r.port, "info", "replication")
            for r in self.replicas
        )

    def _replicas_seen(self) -> bool:
        """Every sentinel knows every replica and the other sentinels (a failover needs both)."""
        for server in self.sentinels:
            master = self._cli(server.port, "sentinel", "master", self.service).split()
            fields = dict(zip(master[::2], master[1::2], strict=False))
            if int(fields.get("num-slaves", 0)) < len(self.replicas):
                return False
            if int(fields.get("num-other-sentinels", 0)) < len(self.sentinels) - 1:
                return False
        return True

    @staticmethod
    def _cli(port: int, *args: str) -> str:
        return subprocess.run(
            ["redis-cli", "-p", str(port), *args],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout

    def master_port(self) -> int | None:
        """The port of the master as the first sentinel that answers names it (None: none)."""
        for server in self.sentinels:
            answer = self._cli(
                server.port, "sentinel", "get-master-addr-by-name", self.service
            ).split()
            if len(answer) == 2 and answer[1].isdigit():
                return int(answer[1])
        return None

    def servers(self) -> list[RedisServer]:
        """The master the deployment started with and its replicas."""
        return [self.master, *self.replicas]

    def kill_master(self) -> RedisServer:
        """SIGKILL the server the sentinels name as master now; returns it (stopped)."""
        port = self.master_port()
        server = next(s for s in self.servers() if s.port == port)
        server.stop()
        return server

    def cleanup(self) -> None:
        for server in self.sentinels:
            server.cleanup()
        for replica in self.replicas:
            replica.cleanup()
