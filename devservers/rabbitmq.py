"""A real RabbitMQ node the tests start, kill and restart themselves (Debian's rabbitmq-server).

Each node runs as the current user with everything (data, logs, Erlang cookie) in a temporary
directory, listens on 127.0.0.1 only, has no plugins, and keeps its name and ports across
restarts, so durable queues and persistent messages survive a restart as on a real broker. It
takes a few seconds to start. If rabbitmq-server is missing the test fails (it never skips).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from devservers.ports import free_port

#: The server script itself (``/usr/sbin/rabbitmq-server`` switches to the rabbitmq user).
SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
#: Its control tool, run as the current user against this node.
CTL = SERVER.with_name("rabbitmqctl")


class RabbitServer:
    """A throwaway RabbitMQ node on 127.0.0.1 (guest/guest) that can be killed and restarted."""

    def __init__(self, cookie: str | None = None, conf: str = "") -> None:
        self.conf = conf  # more rabbitmq.conf lines
        self.port = free_port()
        self.dist_port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="mailguard-rabbitmq-"))
        self.process: subprocess.Popen[bytes] | None = None
        if cookie is not None:  # the Erlang cookie the nodes of one cluster share
            path = self.dir / ".erlang.cookie"
            path.write_text(cookie)
            path.chmod(0o400)

    @property
    def node(self) -> str:
        """The Erlang node name (``rabbitmqctl -n``, ``join_cluster``)."""
        return f"mailguard{self.port}@localhost"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def _env(self) -> dict[str, str]:
        d = self.dir
        (d / "enabled_plugins").write_text("[].\n")
        (d / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\nloopback_users = none\n{self.conf}"
        )
        (d / "rabbitmq-env.conf").write_text("")
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(d),  # the Erlang cookie goes here
            "RABBITMQ_NODENAME": self.node,
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
        self.launch()
        return self.wait(timeout)

    def launch(self) -> None:
        """Start the node's process without waiting for it (:meth:`wait`)."""
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

    def wait(self, timeout: float = 60.0) -> RabbitServer:
        """Wait until the launched node answers AMQP; RuntimeError (its log's end) if not."""
        assert self.process is not None, "launch() first"
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


class RabbitCluster:
    """Three RabbitMQ nodes on 127.0.0.1 (one Erlang cookie; three names, ports and data
    directories) clustered by ``rabbitmqctl`` (``join_cluster``), named ``mailguard-test``
    (``cluster_name`` in each node's configuration). The nodes start in parallel, then the
    second and third join the first, in parallel too (about 25 s on 2 busy cores:
    :attr:`timings`). :attr:`url` is Celery's fail-over list of all three. Stopped by pid."""

    NAME = "mailguard-test"

    def __init__(self, size: int = 3) -> None:
        cookie = secrets.token_hex(16).upper()
        conf = f"cluster_name = {self.NAME}\n"
        self.nodes = [RabbitServer(cookie=cookie, conf=conf) for _ in range(size)]
        self.timings: dict[str, float] = {}  # seconds: nodes up, joined

    @property
    def url(self) -> str:
        """``amqp://a;amqp://b;amqp://c``: kombu's fail-over list, first node first."""
        return ";".join(node.url for node in self.nodes)

    def start(self, timeout: float = 90.0) -> RabbitCluster:
        started = time.monotonic()
        try:
            for node in self.nodes:
                node.launch()
            for node in self.nodes:
                node.wait(timeout)
            self.timings["up"] = time.monotonic() - started
            first = self.nodes[0]
            with ThreadPoolExecutor(len(self.nodes)) as pool:
                list(pool.map(lambda node: self._join(node, first.node), self.nodes[1:]))
            self.timings["joined"] = time.monotonic() - started
        except BaseException:
            self.cleanup()
            raise
        return self

    @staticmethod
    def _join(node: RabbitServer, first: str, tries: int = 3) -> None:
        """``stop_app``, ``join_cluster first``, ``start_app`` in one ``rabbitmqctl eval`` (each
        CLI call boots an Erlang VM: seconds on a loaded machine). Two nodes joining at once
        can abort each other's schema copy (mnesia's ``schema_prepare``): such a join is tried
        again, after resetting the node's own data, at most ``tries`` times in all."""
        join = f"ok = rabbit_mnesia:join_cluster('{first}', disc)"
        for attempt in range(tries):
            reset = "ok = rabbit_mnesia:reset(), " if attempt else ""
            try:
                done = node.ctl("eval", f"ok = rabbit:stop(), {reset}{join}, rabbit:start().")
            except RuntimeError:
                if attempt == tries - 1:
                    raise
                time.sleep(attempt + 1)
                continue
            if done.strip() != "ok":
                raise RuntimeError(f"{node.node} did not join {first}: {done}")
            return

    def running(self) -> list[str]:
        """The names of the cluster's running nodes, as the first live node sees them."""
        live = next(node for node in self.nodes if node.process is not None)
        status = json.loads(live.ctl("cluster_status", "--formatter", "json"))
        return sorted(status["running_nodes"])

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()
