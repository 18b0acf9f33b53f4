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
  ``check_policy_service``, started and stopped with the relay.

Postfix needs root and the package's ``postfix`` user; :meth:`stop` sends SIGTERM to the
master's pid (its children exit with it). Not for production use: a test-infrastructure helper.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from devservers.ports import free_port
from devservers.postgrey import Postgrey, _binary
from devservers.smtp_server import TestCertificate

#: The relay's host name (``myhostname``, the SASL realm, postgrey's ``--hostname``).
HOSTNAME = "relay.mailguard.test"
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
        """Start Postfix (and its postgrey) and wait until the smtpd answers ``220``."""
        postfix = _binary("postfix", "postfix")
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
            if self._greets():
                return self
            time.sleep(0.05)
        output = f"{started.stdout}{started.stderr}\n{self.log()[-3000:]}"
        self.stop()
        raise RuntimeError(f"postfix on port {self.port} did not start:\n{output}")

    def _greets(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                sock.settimeout(2.0)
                greeting = sock.recv(512)
                sock.sendall(b"QUIT\r\n")
                return greeting.startswith(b"220")
        except OSError:
            return False

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
        """SIGTERM to the master's pid; wait until it and its port are gone (SIGKILL after
        ``timeout`` seconds). Postgrey is stopped too. Mail in the queue stays queued."""
        pid = self.master_pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            if not _gone(pid, timeout):
                os.kill(pid, signal.SIGKILL)
                _gone(pid, timeout)
        deadline = time.monotonic() + timeout
        while self._listening() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.postgrey is not None:
            self.postgrey.stop()

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def restart(self) -> None:
        self.stop()
        self.start()

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
            [_binary("postqueue", "postfix"), "-c", str(self.config.etc), "-j"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return sum(1 for line in listed.stdout.splitlines() if line.strip() and json.loads(line))

    def log(self) -> str:
        """Postfix's log so far (its ``maillog_file``)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_count(self, text: str) -> int:
        """How many lines of the log contain ``text`` (``too much mail from``, ...)."""
        return sum(1 for line in self.log().splitlines() if text in line)


@dataclass(frozen=True)
class InstanceConfig:
    """What one instance's ``main.cf``, ``master.cf``, mailbox map and SASL files say."""

    dir: Path
    port: int
    domain: str
    users: tuple[str, ...]
    cert: TestCertificate | None
    sasl: bool
    message_rate_limit: int | None
    connection_rate_limit: int | None
    rate_time_unit: str
    policy_service: str | None

    @property
    def etc(self) -> Path:
        """The configuration directory (``postfix -c``): root's files only, apart from the
        queue, data, mailboxes and SASL database beside it, as ``postfix check`` wants."""
        return self.dir / "etc"


def main_cf(config: InstanceConfig) -> dict[str, str]:
    """The instance's ``main.cf`` parameters."""
    d = config.dir
    params = {
        "compatibility_level": "3.6",
        "queue_directory": f"{d}/queue",
        "data_directory": f"{d}/data",
        "mail_owner": "postfix",
        "setgid_group": "postdrop",
        "myhostname": HOSTNAME,
        "mydomain": "mailguard.test",
        "myorigin": "$myhostname",
        "mydestination": "",
        "local_recipient_maps": "",
        "relay_domains": "",
        "alias_maps": "",
        "alias_database": "",
        "inet_interfaces": "127.0.0.1",
        "inet_protocols": "ipv4",
        "mynetworks": "127.0.0.0/8",
        "smtp_dns_support_level": "disabled",
        "lmtp_dns_support_level": "disabled",
        "smtp_host_lookup": "native",
        "lmtp_host_lookup": "native",
        "smtpd_peername_lookup": "no",
        "maillog_file": f"{d}/maillog",
        "maillog_file_prefixes": str(d),
        "virtual_mailbox_domains": config.domain,
        "virtual_mailbox_base": f"{d}/mail",
        "virtual_mailbox_maps": f"texthash:{config.etc}/vmailbox",
        "virtual_uid_maps": f"static:{MAILBOX_UID}",
        "virtual_gid_maps": f"static:{MAILBOX_UID}",
        "virtual_transport": "virtual",
        "smtpd_banner": "$myhostname ESMTP",
        "biff": "no",
        "smtpd_relay_restrictions": "permit_mynetworks, permit_sasl_authenticated, reject",
        "smtpd_recipient_restrictions": ", ".join(
            ["reject_unlisted_recipient"]
            + ([f"check_policy_service {config.policy_service}"] if config.policy_service else [])
        ),
    }
    if config.cert is not None:
        params |= {
            "smtpd_tls_security_level": "may",
            "smtpd_tls_cert_file": str(config.cert.cert),
            "smtpd_tls_key_file": str(config.cert.key),
            "smtpd_tls_loglevel": "1",
        }
    if config.sasl:
        params |= {
            "smtpd_sasl_auth_enable": "yes",
            "smtpd_sasl_type": "cyrus",
            "smtpd_sasl_path": "smtpd",
            "smtpd_sasl_local_domain": HOSTNAME,
            "cyrus_sasl_config_path": f"{config.etc}/sasl",
            "smtpd_sasl_security_options": "noanonymous",
            "smtpd_tls_auth_only": "yes" if config.cert is not None else "no",
            "mynetworks": "",  # loopback too must log in
            "smtpd_relay_restrictions": "permit_sasl_authenticated, reject",
        }
    limits = {
        "smtpd_client_message_rate_limit": config.message_rate_limit,
        "smtpd_client_connection_rate_limit": config.connection_rate_limit,
    }
    if any(value is not None for value in limits.values()):
        params |= {k: str(v) for k, v in limits.items() if v is not None}
        params["anvil_rate_time_unit"] = config.rate_time_unit
        params["smtpd_client_event_limit_exceptions"] = ""  # loopback is limited too
    return params


#: ``master.cf``: the services Postfix needs, none chrooted; the smtpd line is added per port.
MASTER_CF = """\
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
tlsmgr    unix  -       -       n       1000?   1       tlsmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
proxywrite unix -       -       n       -       1       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
local     unix  -       n       n       -       -       local
virtual   unix  -       n       n       -       -       virtual
lmtp      unix  -       -       n       -       -       lmtp
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
"""
#: Who owns the delivered Maildir files (``nobody``; the ``virtual`` agent's minimum is 100).
MAILBOX_UID = 65534


def write_config(config: InstanceConfig) -> None:
    """Write ``main.cf``, ``master.cf``, the mailbox map and the mailbox base."""
    d = config.dir
    lines = [f"{name} = {value}" for name, value in main_cf(config).items()]
    config.etc.mkdir(mode=0o755)
    (config.etc / "main.cf").write_text("\n".join(lines) + "\n")
    smtpd = f"127.0.0.1:{config.port} inet n - n - - smtpd\n"
    (config.etc / "master.cf").write_text(smtpd + MASTER_CF)
    (config.etc / "vmailbox").write_text(
        "".join(f"{user}@{config.domain} {config.domain}/{user}/\n" for user in config.users)
    )
    (d / "mail").mkdir()
    os.chown(d / "mail", MAILBOX_UID, MAILBOX_UID)
    (d / "queue").mkdir(mode=0o755)  # root's; `postfix start` makes the rest of it
    (d / "data").mkdir(mode=0o700)
    account = pwd.getpwnam("postfix")
    os.chown(d / "data", account.pw_uid, account.pw_gid)


def write_sasldb(config: InstanceConfig, logins: Mapping[str, str]) -> None:
    """cyrus SASL's ``smtpd.conf`` (auxprop, sasldb) in ``etc/sasl`` (where Debian's Postfix
    looks: ``$config_directory/sasl``, also named by ``cyrus_sasl_config_path``) and a sasldb
    with ``logins`` beside the configuration, readable by the postfix user only."""
    (config.etc / "sasl").mkdir(mode=0o755)
    store = config.dir / "sasldb"
    store.mkdir(mode=0o755)
    db = store / "sasldb2"
    (config.etc / "sasl" / "smtpd.conf").write_text(
        "pwcheck_method: auxprop\nauxprop_plugin: sasldb\nmech_list: PLAIN LOGIN\n"
        f"sasldb_path: {db}\n"
    )
    saslpasswd2 = _binary("saslpasswd2", "sasl2-bin")
    for user, password in logins.items():
        subprocess.run(
            [saslpasswd2, "-p", "-c", "-f", str(db), "-u", HOSTNAME, user],
            input=password,
            text=True,
            capture_output=True,
            timeout=10,
            check=True,
        )
    account = pwd.getpwnam("postfix")
    os.chown(db, account.pw_uid, account.pw_gid)
    db.chmod(0o600)


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
