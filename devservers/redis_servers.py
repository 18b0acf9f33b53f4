"""Real Redis servers the tests and benchmarks start, stop and restart themselves.

A single ``redis-server``, a three-node cluster, a sentinel. Neither the suite nor the
benchmarks rely on a server already running on the machine. If ``redis-server`` cannot be
started the fixture fails the test (it never skips): a missing server is a broken environment.
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
    """A redis-server in sentinel mode watching ``master`` under the service name ``mymaster``."""

    def __init__(self, master: RedisServer, service: str = "mymaster") -> None:
        self.master = master
        self.service = service
        self.server = RedisServer()
        config = self.server.dir / "sentinel.conf"
        config.write_text(
            f"port {self.server.port}\nbind 127.0.0.1\n"
            f"sentinel monitor {service} 127.0.0.1 {master.port} 1\n"
            f"sentinel down-after-milliseconds {service} 1000\n"
        )
        self.config = config

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.server.port}/{self.service}/0"

    def start(self, timeout: float = 10.0) -> RedisSentinel:
        binary = shutil.which("redis-server")
        assert binary is not None
        self.server.process = subprocess.Popen(
            [binary, str(self.config), "--sentinel", "--logfile", str(self.server.dir / "s.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.server.ping():
                return self
            time.sleep(0.05)
        raise RuntimeError("redis sentinel did not start")

    def cleanup(self) -> None:
        self.server.cleanup()
