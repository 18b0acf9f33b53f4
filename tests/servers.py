"""Real servers for the test suite: a redis-server the tests start, stop and restart themselves.

The suite never relies on a server already running on the machine. If ``redis-server`` cannot be
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


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A throwaway ``redis-server`` on 127.0.0.1, no persistence, that can be stopped and restarted.

    The port stays the same across restarts so that clients built from ``url`` reconnect.
    """

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
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
