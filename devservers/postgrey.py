"""A real postgrey (Debian's package) on 127.0.0.1 for the tests: a greylisting policy service.

Run in the foreground as a child of the test (stopped by its pid), with its own database
directory, empty whitelists (the system's ``/etc/postgrey`` lists are not read) and no client
auto-whitelisting, so each new (client, sender, recipient) triplet is greylisted for
``delay`` seconds and then passes. Postfix asks it through ``check_policy_service
inet:127.0.0.1:PORT`` (:class:`devservers.postfix.PostfixRelay` with ``greylist_delay``).

Not for production use: a test-infrastructure helper.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from devservers.ports import free_port
from devservers.processes import terminate

#: What postgrey answers a greylisted RCPT with, through Postfix (``--greylist-text``'s
#: default; Postfix prefixes ``450 4.2.0 <rcpt>: Recipient address rejected:``).
GREYLISTED = "Greylisted, see http://postgrey.schweikert.ch/help/"


def installed_binary(name: str, package: str) -> str:
    """The path of the installed program ``name`` (also looked for in ``/usr/sbin``); a
    ``RuntimeError`` naming the Debian ``package`` and the install script when missing."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin")
    if found is None:
        raise RuntimeError(
            f"{name} is not installed: run `sh .ci/install-redis` (apt-get install {package}); "
            "the relay tests need a real server and never skip without one"
        )
    return found


class Postgrey:
    """postgrey ``--delay=delay`` on ``127.0.0.1:port``, its database in a directory of its own.

    ``delay`` is in whole seconds, at least 1 (postgrey reads 0 as its default, 300).
    ``start`` waits until the port accepts connections; ``stop`` sends SIGTERM to the pid and
    waits for it to exit; the database survives a restart (a triplet seen before stays seen).
    """

    def __init__(self, delay: int = 2, port: int | None = None) -> None:
        if delay < 1:
            raise ValueError(f"postgrey's delay must be at least 1 s, got {delay}")
        self.delay = delay
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="mailguard-postgrey-"))
        self.dbdir = self.dir / "db"
        self.log_path = self.dir / "postgrey.log"
        self.pidfile = self.dir / "postgrey.pid"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """Where Postfix asks it: ``inet:127.0.0.1:PORT``."""
        return f"inet:127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> Postgrey:
        binary = installed_binary("postgrey", "postgrey")
        account = pwd.getpwnam("postgrey")  # the package's user; postgrey drops to it
        self.dir.chmod(0o755)  # mkdtemp's 0700 would keep the postgrey user out
        self.dbdir.mkdir(exist_ok=True)
        os.chown(self.dbdir, account.pw_uid, account.pw_gid)
        empty = self.dir / "whitelist"
        empty.write_text("")
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                binary,
                f"--inet=127.0.0.1:{self.port}",
                f"--dbdir={self.dbdir}",
                f"--delay={self.delay}",
                "--auto-whitelist-clients=0",
                f"--whitelist-clients={empty}",
                f"--whitelist-recipients={empty}",
                "--lookup-by-host",
                "--hostname=relay.mailguard.test",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.pidfile.write_text(f"{self.process.pid}\n")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if self._listening():
                return self
            time.sleep(0.05)
        output = self.log()[-2000:]
        self.stop()
        raise RuntimeError(f"postgrey on port {self.port} did not start:\n{output}")

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def log(self) -> str:
        """What postgrey wrote (one line per decision: ``action=greylist``, ``action=pass``)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to the pid, SIGKILL after ``timeout`` seconds; nothing if not running."""
        terminate(self.process, timeout)
        self.process = None
        self.pidfile.unlink(missing_ok=True)

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        """Stop it and remove its directory."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Postgrey:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()
