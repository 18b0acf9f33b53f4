"""What one test Postfix instance is configured with, written as Postfix reads it: ``main.cf``,
``master.cf``, the mailbox map, cyrus SASL's ``smtpd.conf`` and sasldb.

The layout under the instance's directory: ``etc/`` (the ``postfix -c`` directory: root's files
only, as ``postfix check`` wants), ``queue/``, ``data/``, ``mail/`` (the Maildirs), ``sasldb/``
and ``maillog``. Used by :class:`devservers.postfix.PostfixRelay`; not for production use.
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from devservers.postgrey import installed_binary
from devservers.smtp_server import TestCertificate

#: The relay's host name (``myhostname``, the SASL realm, postgrey's ``--hostname``).
HOSTNAME = "relay.mailguard.test"


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
    refused_subject: str | None = None

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
    if config.refused_subject is not None:
        params["header_checks"] = f"regexp:{config.etc}/header_checks"
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
    write_header_checks(config, config.refused_subject)
    (config.etc / "vmailbox").write_text(
        "".join(f"{user}@{config.domain} {config.domain}/{user}/\n" for user in config.users)
    )
    (d / "mail").mkdir()
    os.chown(d / "mail", MAILBOX_UID, MAILBOX_UID)
    (d / "queue").mkdir(mode=0o755)  # root's; `postfix start` makes the rest of it
    (d / "data").mkdir(mode=0o700)
    account = pwd.getpwnam("postfix")
    os.chown(d / "data", account.pw_uid, account.pw_gid)


def write_header_checks(config: InstanceConfig, refused_subject: str | None) -> None:
    """The ``header_checks`` table: a message whose Subject contains ``refused_subject`` is
    refused at the end of DATA (``550 5.7.1 Subject refused by this relay``); empty with None.
    Read by Postfix's processes at their start (a restart takes a change in)."""
    if refused_subject is not None and not re.fullmatch(r"[A-Za-z0-9 -]+", refused_subject):
        raise ValueError("refused_subject: letters, digits, spaces and hyphens only")
    rule = f"/^Subject:.*{refused_subject}/ REJECT 5.7.1 Subject refused by this relay\n"
    (config.etc / "header_checks").write_text(rule if refused_subject is not None else "")


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
    saslpasswd2 = installed_binary("saslpasswd2", "sasl2-bin")
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
