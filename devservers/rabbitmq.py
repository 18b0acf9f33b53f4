"""A real RabbitMQ node the tests start, kill and restart themselves (Debian's rabbitmq-server).

Each node runs as the current user with everything (data, logs, Erlang cookie) in a temporary
directory, listens on 127.0.0.1 only, has no plugins, and keeps its name and ports across
restarts, so durable queues and persistent messages survive a restart as on a real broker. It
takes a few seconds to start. If rabbitmq-server is missing the test fails (it never skips).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from devservers.ports import free_port

#: The server script itself (``/usr/sbin/rabbitmq-server`` switches to the rabbitmq user).
SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
#: Its control tool, run as the current user against this node.
CTL = SERVER.with_name("rabbitmqctl")


class RabbitServer:
    """A throwaway RabbitMQ node on 127.0.0.1 (guest/guest) that can be killed and restarted."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dist_port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="mailguard-rabbitmq-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def _env(self) -> dict[str, str]:
        d = self.dir
        (d / "enabled_plugins").write_text("[].\n")
        (d / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\nloopback_users = none\n"
        )
        (d / "rabbitmq-env.conf").write_text("")
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(d),  # the Erlang cookie goes here
            "RABBITMQ_NODENAME": f"mailguard{self.port}@localhost",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_FEATURE_FLAGS_FILE": str(d / "feature_flags"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(d / "plugins-expand"),
        }

    def start(self, timeout: float = 60.0) -> RabbitServer:
        if not SERVER.exists():
            raise RuntimeError(
                "rabbitmq-server is not installed: run `sh .ci/install-redis` (apt-get install "
                "rabbitmq-server); the suite needs a real broker and never skips without one"
            )
        log = (self.dir / "server.log").open("ab")
        self.process = subprocess.Popen(
            [str(SERVER)],
            env=self._env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if self.accepts():
                return self
            time.sleep(0.2)
        output = (self.dir / "server.log").read_text(errors="replace")[-2000:]
        self.stop()
        raise RuntimeError(f"rabbitmq-server on port {self.port} did not start:\n{output}")

    def accepts(self) -> bool:
        """True when the node answers the AMQP protocol header on its port."""
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock,
        ):
            sock.sendall(b"AMQP\x00\x00\x09\x01")
            return len(sock.recv(8)) > 0
        return False

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """Run ``rabbitmqctl <args>`` against this node; its output (raises when it fails)."""
        env = self._env()
        done = subprocess.run(
            [str(CTL), "-n", env["RABBITMQ_NODENAME"], *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed: {done.stderr or done.stdout}")
        return done.stdout

    def stop(self) -> None:
        """Kill the node at once (SIGKILL to its process group), as an outage would."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
