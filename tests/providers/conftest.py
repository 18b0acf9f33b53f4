"""The test DNS: one dnsmasq per module answering the providers' MX records (never the internet)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devservers.dns_server import DnsServer, MxRecord

#: The MX records the tests resolve: consumer domains as the providers publish them, a Google
#: Workspace domain of the test's own, and domains on unknown MX hosts.
RECORDS: tuple[MxRecord, ...] = (
    ("gmail.com", "gmail-smtp-in.l.google.com", 5),
    ("gmail.com", "alt1.gmail-smtp-in.l.google.com", 10),
    ("googlemail.com", "gmail-smtp-in.l.google.com", 5),
    ("shop.test", "aspmx.l.google.com", 1),
    ("shop.test", "alt1.aspmx.l.google.com", 5),
    ("new.test", "smtp.google.com", 1),
    ("outlook.com", "outlook-com.olc.protection.outlook.com", 5),
    ("contoso.test", "contoso-test.mail.protection.outlook.com", 0),
    ("yahoo.com", "mta5.am0.yahoodns.net", 1),
    ("aol.com", "mx-aol.mail.gm0.yahoodns.net", 1),
    ("proton.test", "mail.protonmail.ch", 10),
    ("corp.test", "mx1.mailhost.example.net", 10),
    ("corp.test", "mx2.backup.example.org", 20),
    ("uk.test", "mx.mailer.example.co.uk", 10),
    ("backup.test", "mx.own.example.net", 10),
    ("backup.test", "alt1.aspmx.l.google.com", 20),
)
#: A name with an A record and no MX (its own implicit MX).
HOSTS = (("nomx.test", "127.0.0.9"),)
#: The TTL the test DNS answers with, in seconds (inside the finder's 5 min-1 day clamp).
TTL = 600


@pytest.fixture(scope="module")
def dns_server() -> Iterator[DnsServer]:
    """A dnsmasq on 127.0.0.1 with :data:`RECORDS`, for the module (not to be stopped)."""
    with DnsServer(RECORDS, HOSTS, ttl=TTL) as server:
        yield server
