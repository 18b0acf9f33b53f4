"""A real DNS server on 127.0.0.1 for the tests: Debian's dnsmasq, answering only what the test
configures (never the internet: no upstream servers, no ``/etc/hosts``, no ``resolv.conf``).

Run in the foreground as a child of the test (stopped by its pid), on a port from
:mod:`devservers.ports` (UDP and TCP), with its configuration file and its query log in a
directory of its own:

- ``mx`` records: ``mx-host=domain,target,preference`` lines, answered with the TTL
  ``ttl`` (``--local-ttl``);
- ``hosts``: ``host-record=name,ip`` lines (a name with an A record and no MX);
- every name under a configured domain's top-level label that is not configured answers
  NXDOMAIN (``local=/tld/``);
- each query is logged (``--log-queries`` to a file): :meth:`DnsServer.queries` counts them.

Not for production use: a test-infrastructure helper.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from devservers.ports import free_port
from devservers.postgrey import installed_binary
from devservers.processes import terminate

#: An MX record: (domain, target host, preference).
MxRecord = tuple[str, str, int]


class DnsServer:
    """dnsmasq on ``127.0.0.1:port`` answering ``mx`` and ``hosts`` with TTL ``ttl`` seconds.

    ``start`` waits until it answers a query; ``stop`` sends SIGTERM to the pid (an outage:
    queries then time out) and ``start`` again brings it back on the same port.
    """

    def __init__(
        self,
        mx: Sequence[MxRecord] = (),
        hosts: Sequence[tuple[str, str]] = (),
        *,
        ttl: int = 300,
        port: int | None = None,
    ) -> None:
        self.mx = tuple(mx)
        self.hosts = tuple(hosts)
        self.ttl = ttl
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="mailguard-dns-"))
        self.dir.chmod(0o755)  # dnsmasq drops to its own user before writing the log
        self.conf_path = self.dir / "dnsmasq.conf"
        self.log_path = self.dir / "queries.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def servers(self) -> str:
        """The ``MAILGUARD_DNS_SERVERS`` value that points at it: ``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self.port}"

    def _config(self) -> str:
        names = [domain for domain, _, _ in self.mx] + [name for name, _ in self.hosts]
        tlds = sorted({name.rsplit(".", 1)[-1] for name in names})
        lines = [f"local=/{tld}/" for tld in tlds]
        lines += [f"mx-host={domain},{target},{pref}" for domain, target, pref in self.mx]
        lines += [f"host-record={name},{ip}" for name, ip in self.hosts]
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 15.0) -> DnsServer:
        binary = installed_binary("dnsmasq", "dnsmasq")
        self.conf_path.write_text(self._config())
        self.log_path.touch()
        self.log_path.chmod(0o666)
        offset = len(self.log())  # a restart appends: wait for this run's start line
        out = (self.dir / "dnsmasq.out").open("ab")
        self.process = subprocess.Popen(
            [
                binary,
                "--no-daemon",
                "--no-resolv",
                "--no-hosts",
                "--no-poll",
                f"--port={self.port}",
                "--listen-address=127.0.0.1",
                "--bind-interfaces",
                f"--local-ttl={self.ttl}",
                "--log-queries",
                f"--log-facility={self.log_path}",
                f"--conf-file={self.conf_path}",
                "--pid-file=",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if "started, version" in self.log()[offset:]:
                return self
            time.sleep(0.05)
        output = (self.log() + (self.dir / "dnsmasq.out").read_text(errors="replace"))[-2000:]
        self.stop()
        raise RuntimeError(f"dnsmasq on port {self.port} did not start:\n{output}")

    def log(self) -> str:
        """What dnsmasq logged: its start, then one ``query[MX] name from ...`` line a query."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def queries(self, name: str, rdtype: str = "MX") -> int:
        """How many ``rdtype`` queries for ``name`` it has received."""
        pattern = re.compile(rf"query\[{re.escape(rdtype)}\] {re.escape(name)} from ", re.I)
        return len(pattern.findall(self.log()))

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to the pid, SIGKILL after ``timeout`` seconds; nothing if not running."""
        terminate(self.process, timeout)
        self.process = None

    def cleanup(self) -> None:
        """Stop it and remove its directory."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> DnsServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()
