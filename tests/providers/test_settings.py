"""MAILGUARD_DNS_SERVERS and MAILGUARD_DNS_TIMEOUT: read, bounded, refused in one line (pure),
and a finder built from them asking the test DNS."""

from __future__ import annotations

import pytest

from devservers.dns_server import DnsServer
from mailer.clock import ManualClock
from mailer.providers import KNOWN, Provider, provider_finder
from mailer.providers.resolver import parse_servers
from mailer.settings import Settings


def test_the_defaults_are_the_system_resolver_and_two_seconds() -> None:
    settings = Settings.from_env({})
    assert settings.dns_servers == ()
    assert settings.dns_timeout == 2.0


def test_servers_are_ip_and_port_pairs() -> None:
    settings = Settings.from_env(
        {
            "MAILGUARD_DNS_SERVERS": "127.0.0.1:5353, [::1]:53,10.0.0.2",
            "MAILGUARD_DNS_TIMEOUT": "500ms",
        }
    )
    assert settings.dns_servers == (("127.0.0.1", 5353), ("::1", 53), ("10.0.0.2", 53))
    assert settings.dns_timeout == 0.5


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MAILGUARD_DNS_SERVERS": "dns.example:53"}, "is not ip\\[:port\\] \\(an IP address\\)"),
        ({"MAILGUARD_DNS_SERVERS": "127.0.0.1:0"}, "a port 1-65535"),
        ({"MAILGUARD_DNS_SERVERS": "127.0.0.1:x"}, "a port 1-65535"),
        ({"MAILGUARD_DNS_TIMEOUT": "1m"}, "MAILGUARD_DNS_TIMEOUT must be 100ms-30s, got 60 s"),
        ({"MAILGUARD_DNS_TIMEOUT": "10ms"}, "MAILGUARD_DNS_TIMEOUT must be 100ms-30s"),
    ],
)
def test_a_bad_value_is_refused_in_one_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        Settings.from_env(env)
    assert "\n" not in str(refused.value)


def test_empty_items_are_ignored() -> None:
    assert parse_servers(" , 127.0.0.1 ,") == (("127.0.0.1", 53),)


def test_a_finder_from_the_settings_asks_the_named_server(dns_server: DnsServer) -> None:
    settings = Settings.from_env({"MAILGUARD_DNS_SERVERS": dns_server.servers})
    finder = provider_finder(
        "memory://", servers=settings.dns_servers, timeout=settings.dns_timeout, clock=ManualClock()
    )
    assert finder.provider_of("outlook.com") == Provider("microsoft", KNOWN)
