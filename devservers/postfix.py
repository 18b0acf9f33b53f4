"""A real Postfix relay (Debian's package) on 127.0.0.1 for the tests, never the system's.

An instance of its own: ``postfix -c DIR start`` with a private ``main.cf`` and ``master.cf``
in a temporary directory, its own ``queue_directory``, ``data_directory``, mailboxes and log
file (``maillog_file``), one ``smtpd`` listening on ``127.0.0.1:port`` (a port from
:mod:`devservers.ports`), no DNS, no chroot. Mail for ``users`` at ``domain`` is delivered by
Postfix's ``virtual`` agent into Maildirs that :meth:`PostfixRelay.maildir` reads; any other
address of the domain is refused at RCPT with ``550 5.1.1``. Options, each Postfix's own
mechanism:

- ``cert``: STARTTLS with that certificate (``smtpd_tls_security_level = may``);
- ``logins``: SMTP AUTH (PLAIN, LOGIN) checked by cyrus SASL against a sasldb of its own
  (``saslpasswd2 -f``, ``cyrus_sasl_config_path``); mail is then accepted only from an
  authenticated client, and with ``cert`` only after STARTTLS (``smtpd_tls_auth_only``);
- ``message_rate_limit`` / ``connection_rate_limit``: anvil's per-client limits
  (``smtpd_client_message_rate_limit``, ``smtpd_client_connection_rate_limit``) per
  ``rate_time_unit``, loopback not exempt;
- ``greylist_delay``: a :class:`devservers.postgrey.Postgrey` of its own asked through
  ``check_policy_service``, started and stopped with the relay;
- ``refused_subject``: a message whose Subject contains this text is refused at the end of
  DATA with ``550 5.7.1`` (``header_checks``), until :meth:`PostfixRelay.stop_refusing`.

Postfix needs root and the package's ``postfix`` user; :meth:`stop` sends SIGTERM to the
master's pid (its children exit with it). Not for production use: a test-infrastructure helper.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from devservers.ports import free_port
from devservers.postfix_config import (
    HOSTNAME,
    InstanceConfig,
    write_config,
    write_header_checks,
    write_sasldb,
)
from devservers.postgrey import Postgrey, installed_binary
from devservers.smtp_server import TestCertificate

#: Postfix's reply to a RCPT for an address of the domain that has no mailbox.
UNKNOWN_USER = "550 5.1.1"
#: Postfix's reply beyond ``smtpd_client_message_rate_limit`` (``%s``: the client's address).
TOO_MUCH_MAIL = "450 4.7.1 Error: too much mail from %s"
#: Postfix's reply beyond ``smtpd_client_connection_rate_limit``.
TOO_MANY_CONNECTIONS = f"421 4.7.0 {HOSTNAME} Error: too many connections from %s"


class PostfixRelay:
    """A Postfix instance of its own on ``127.0.0.1:port``; see the module docstring.

    ``users`` are the local parts with a mailbox at ``domain``; ``logins`` maps SASL user
    names to passwords. The port, the configuration and the mailboxes stay the same across
    :meth:`restart`. Use as a context manager, or call :meth:`start` and :meth:`cleanup`.
    """

    def __init__(
        self,
        users: Sequence[str] = ("ada", "bob"),
        *,
        domain: str = "example.com",
        cert: TestCertificate | None = None,
        logins: Mapping[str, str] | None = None,
        message_rate_limit: int | None = None,
        connection_rate_limit: int | None = None,
        rate_time_unit: str = "60s",
        greylist_delay: int | None = None,
        refused_subject: str | None = None,
    ) -> None:
        self.users = tuple(users)
        self.domain = domain
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="mailguard-postfix-"))
        self.dir.chmod(0o755)  # the postfix user reads its configuration here
        self.postgrey = Postgrey(greylist_delay) if greylist_delay is not None else None
        self.logins = dict(logins or {})
        self.config = InstanceConfig(
            dir=self.dir,
            port=self.port,
            domain=domain,
            users=self.users,
            cert=cert,
            sasl=bool(self.logins),
            message_rate_limit=message_rate_limit,
            connection_rate_limit=connection_rate_limit,
            rate_time_unit=rate_time_unit,
            policy_service=self.postgrey.address if self.postgrey else None,
            refused_subject=refused_subject,
        )
        self._written = False

    @property
    def url(self) -> str:
        """``smtp://127.0.0.1:PORT``: plain SMTP, with ``?starttls=1`` for STARTTLS."""
        return f"smtp://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.dir / "maillog"

    def address(self, user: str) -> str:
        return f"{user}@{self.domain}"

    def start(self, timeout: float = 20.0) -> PostfixRelay:
        """Start Postfix (and its postgrey) and wait until its master listens on the port.

        Nothing connects to find out (the port's listening socket is read from
        ``/proc/net/tcp``), so no anvil limit counts a probe of the suite's."""
        postfix = installed_binary("postfix", "postfix")
        if os.geteuid() != 0:
            raise RuntimeError(
                "Postfix's master runs as root: run the relay tests as root (CI's containers do)"
            )
        if not self._written:
            write_config(self.config)
            if self.logins:
                write_sasldb(self.config, self.logins)
            self._written = True
        if self.postgrey is not None and self.postgrey.process is None:
            self.postgrey.start()
        started = subprocess.run(
            [postfix, "-c", str(self.config.etc), "start"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        deadline = time.monotonic() + timeout
        while started.returncode == 0 and time.monotonic() < deadline:
            if self.master_pid() is not None and listening(self.port):
                return self
            time.sleep(0.05)
        output = f"{started.stdout}{started.stderr}\n{self.log()[-3000:]}"
        self.stop()
        raise RuntimeError(f"postfix on port {self.port} did not start:\n{output}")

    def master_pid(self) -> int | None:
        """The running master's pid (from its ``pid/master.pid``), None when it is not running."""
        try:
            pid = int((self.dir / "queue" / "pid" / "master.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to the master's pid; wait until it, its children and its port are gone
        (SIGKILL to the master after ``timeout`` seconds). Postgrey is stopped too. Mail in the
        queue stays queued."""
        pid = self.master_pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            if not _gone(pid, timeout):
                os.kill(pid, signal.SIGKILL)
                _gone(pid, timeout)
        deadline = time.monotonic() + timeout
        while (listening(self.port) or self.processes()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.postgrey is not None:
            self.postgrey.stop()

    def processes(self) -> list[int]:
        """The pids of this instance's processes: the master and its children, which Postfix
        gives ``MAIL_CONFIG`` = this configuration directory."""
        mine = f"MAIL_CONFIG={self.config.etc}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:  # gone meanwhile, or not ours to read
                continue
            if mine in environ:
                found.append(int(entry.name))
        return found

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop_refusing(self) -> None:
        """Empty the ``refused_subject`` table and restart Postfix (its processes read the
        table at their start): from now on every Subject is accepted."""
        write_header_checks(self.config, None)
        self.restart()

    def cleanup(self) -> None:
        """Stop everything and remove the instance's directory (mailboxes and queue included)."""
        self.stop()
        if self.postgrey is not None:
            self.postgrey.cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PostfixRelay:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()

    def maildir(self, user: str) -> list[bytes]:
        """The messages delivered to ``user``'s mailbox so far (``new/`` and ``cur/``), each as
        the bytes Postfix wrote (its ``Return-Path``, ``Delivered-To`` and ``Received``
        headers first), oldest first."""
        box = self.dir / "mail" / self.domain / user
        parts = [box / "new", box / "cur"]  # Postfix writes in tmp/, then renames into new/
        files = [f for part in parts if part.is_dir() for f in part.iterdir()]
        files.sort(key=lambda f: (f.stat().st_mtime_ns, f.name))
        return [f.read_bytes() for f in files]

    def delivered(self) -> dict[str, list[bytes]]:
        """Every user's messages (:meth:`maildir`), by local part."""
        return {user: self.maildir(user) for user in self.users}

    def queued(self) -> int:
        """How many messages are in Postfix's queue (incoming, active, deferred, hold), as
        ``mailq`` counts them (``postqueue -j``); 0 when Postfix is not running."""
        if self.master_pid() is None:
            return 0
        listed = subprocess.run(
            [installed_binary("postqueue", "postfix"), "-c", str(self.config.etc), "-j"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return sum(1 for line in listed.stdout.splitlines() if line.strip() and json.loads(line))

    def flush(self) -> None:
        """Have Postfix try every deferred message again now (``postqueue -f``)."""
        subprocess.run(
            [installed_binary("postqueue", "postfix"), "-c", str(self.config.etc), "-f"],
            capture_output=True,
            timeout=10,
            check=True,
        )

    def log(self) -> str:
        """Postfix's log so far (its ``maillog_file``)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_count(self, text: str) -> int:
        """How many lines of the log contain ``text`` (``too much mail from``, ...) so far.

        Postfix's processes log through ``postlogd``, which writes a moment after a reply has
        gone out: to count what a client was just told, use :meth:`logged`."""
        return sum(1 for line in self.log().splitlines() if text in line)

    def logged(self, text: str, at_least: int = 1, timeout: float = 10.0) -> int:
        """:meth:`log_count` once it is at least ``at_least`` (or ``timeout`` seconds passed)."""
        deadline = time.monotonic() + timeout
        while (count := self.log_count(text)) < at_least and time.monotonic() < deadline:
            time.sleep(0.05)
        return count


def listening(port: int) -> bool:
    """Whether a socket listens on ``127.0.0.1:port`` (from ``/proc/net/tcp``: state ``0A``)."""
    local = f"0100007F:{port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[1] == local and fields[3] == "0A":
            return True
    return False


def _gone(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` has exited, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False
