"""ProviderFinder against a real DNS server (dnsmasq on loopback) and a real Redis: the
providers found, one lookup per domain per TTL across a fleet, the bound on a DNS outage."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from devservers.dns_server import DnsServer
from devservers.redis_servers import RedisServer
from mailer.clock import ManualClock
from mailer.providers import (
    FALLBACK,
    IMPLICIT,
    KNOWN,
    MX,
    LookupFailed,
    MemoryProviderStore,
    MxResolver,
    Provider,
    ProviderFinder,
    provider_finder,
)
from mailer.providers.resolver import parse_servers
from mailer.storage import client_from_url
from tests.providers.conftest import TTL

#: The bound on one lookup in these tests, in seconds (the setting's default is 2 s).
TIMEOUT = 0.5


def _finder(url: str, server: DnsServer, clock: ManualClock) -> ProviderFinder:
    """A finder as the workers will build it, on ``url``, asking ``server``."""
    return provider_finder(url, servers=parse_servers(server.servers), clock=clock)


@pytest.mark.parametrize(
    ("domain", "provider"),
    [
        ("gmail.com", Provider("google", KNOWN)),
        ("googlemail.com", Provider("google", KNOWN)),
        ("shop.test", Provider("google", KNOWN)),
        ("new.test", Provider("google", KNOWN)),
        ("Outlook.COM.", Provider("microsoft", KNOWN)),
        ("contoso.test", Provider("microsoft", KNOWN)),
        ("yahoo.com", Provider("yahoo", KNOWN)),
        ("aol.com", Provider("yahoo", KNOWN)),
        ("proton.test", Provider("proton", KNOWN)),
        ("corp.test", Provider("example.net", MX)),
        ("uk.test", Provider("example.co.uk", MX)),
        ("backup.test", Provider("google", KNOWN)),
        ("nomx.test", Provider("nomx.test", IMPLICIT)),
        ("nothing.test", Provider("nothing.test", IMPLICIT)),
    ],
)
def test_each_domain_gets_its_provider_from_its_mx(
    backend_url: str, dns_server: DnsServer, clock: ManualClock, domain: str, provider: Provider
) -> None:
    assert _finder(backend_url, dns_server, clock).provider_of(domain) == provider


def test_one_lookup_per_domain_per_ttl_across_two_finders_on_one_redis(
    redis_url: str, dns_server: DnsServer, clock: ManualClock
) -> None:
    first, second = (_finder(redis_url, dns_server, clock) for _ in range(2))
    before = dns_server.queries("googlemail.com")
    for _ in range(50):
        assert first.provider_of("googlemail.com").name == "google"
        assert second.provider_of("googlemail.com").name == "google"
    assert dns_server.queries("googlemail.com") == before + 1
    clock.advance(TTL - 1)
    assert second.provider_of("googlemail.com").name == "google"
    assert dns_server.queries("googlemail.com") == before + 1
    clock.advance(1)  # the TTL is over: one finder of the two looks it up again
    assert {first.provider_of("googlemail.com"), second.provider_of("googlemail.com")} == {
        Provider("google", KNOWN)
    }
    assert dns_server.queries("googlemail.com") == before + 2


def test_a_fleet_meeting_a_new_domain_at_once_resolves_it_once(
    redis_url: str, dns_server: DnsServer, clock: ManualClock
) -> None:
    finders = [_finder(redis_url, dns_server, clock) for _ in range(8)]
    before = dns_server.queries("contoso.test")
    answers: list[Provider] = []
    start = threading.Barrier(len(finders))

    def ask(finder: ProviderFinder) -> None:
        start.wait()
        answers.append(finder.provider_of("contoso.test"))

    threads = [threading.Thread(target=ask, args=(finder,)) for finder in finders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert dns_server.queries("contoso.test") == before + 1
    # The one that took the lock has the answer; the others use the domain meanwhile.
    assert set(answers) <= {Provider("microsoft", KNOWN), Provider("contoso.test", FALLBACK)}
    assert Provider("microsoft", KNOWN) in answers
    clock.advance(1.0)  # past the pending wait: every finder reads the stored answer
    assert {finder.provider_of("contoso.test") for finder in finders} == {
        Provider("microsoft", KNOWN)
    }
    assert dns_server.queries("contoso.test") == before + 1


def test_a_stored_entry_expires_with_the_ttl(dns_server: DnsServer, clock: ManualClock) -> None:
    finder = _finder("memory://", dns_server, clock)
    before = dns_server.queries("yahoo.com")
    assert finder.provider_of("yahoo.com") == Provider("yahoo", KNOWN)
    clock.advance(TTL - 0.001)
    assert finder.provider_of("yahoo.com") == Provider("yahoo", KNOWN)
    assert dns_server.queries("yahoo.com") == before + 1
    clock.advance(0.001)
    assert finder.provider_of("yahoo.com") == Provider("yahoo", KNOWN)
    assert dns_server.queries("yahoo.com") == before + 2


def test_a_ttl_is_clamped_to_the_finders_bounds(dns_server: DnsServer, clock: ManualClock) -> None:
    resolver = MxResolver(parse_servers(dns_server.servers), lifetime=TIMEOUT)
    store = MemoryProviderStore(clock)
    finder = ProviderFinder(store, resolver, clock, min_ttl=60.0, max_ttl=120.0)
    before = dns_server.queries("aol.com")
    finder.provider_of("aol.com")
    clock.advance(119)
    finder.provider_of("aol.com")
    assert dns_server.queries("aol.com") == before + 1  # TTL 600 s kept 120 s at most
    clock.advance(1)
    finder.provider_of("aol.com")
    assert dns_server.queries("aol.com") == before + 2


@pytest.fixture
def stoppable_dns() -> Iterator[DnsServer]:
    """A dnsmasq of the test's own, which it stops for an outage."""
    server = DnsServer([("gmail.com", "gmail-smtp-in.l.google.com", 5)], ttl=TTL).start()
    yield server
    server.cleanup()


def test_dns_down_the_domain_is_its_own_provider_within_the_bound(
    stoppable_dns: DnsServer, clock: ManualClock
) -> None:
    servers = parse_servers(stoppable_dns.servers)
    resolver = MxResolver(servers, lifetime=TIMEOUT)
    finder = ProviderFinder(MemoryProviderStore(clock), resolver, clock, negative_ttl=60.0)
    stoppable_dns.stop()
    with pytest.raises(LookupFailed) as failed:
        resolver.mx("gmail.com")
    # dnspython gave up at its lifetime (TIMEOUT), not at a socket's or the OS's timeout.
    assert type(failed.value.__cause__).__name__ == "LifetimeTimeout"
    assert finder.provider_of("gmail.com") == Provider("gmail.com", FALLBACK)
    stoppable_dns.start()
    # The failure is cached a minute: no mail to the domain waits on DNS again meanwhile.
    clock.advance(59)
    assert finder.provider_of("gmail.com") == Provider("gmail.com", FALLBACK)
    assert stoppable_dns.queries("gmail.com") == 0
    clock.advance(1)
    assert finder.provider_of("gmail.com") == Provider("google", KNOWN)
    assert stoppable_dns.queries("gmail.com") == 1


def test_redis_down_the_finder_still_answers(
    own_redis: RedisServer, dns_server: DnsServer, clock: ManualClock
) -> None:
    url = own_redis.url
    finder = provider_finder(
        url, servers=parse_servers(dns_server.servers), clock=clock, client=client_from_url(url)
    )
    own_redis.stop()
    assert finder.provider_of("proton.test") == Provider("proton", KNOWN)


def test_a_bad_domain_is_refused_in_one_line(dns_server: DnsServer, clock: ManualClock) -> None:
    finder = _finder("memory://", dns_server, clock)
    for bad in ("", ".", "a" * 254):
        with pytest.raises(ValueError, match="a domain has 1 to 253 characters"):
            finder.provider_of(bad)


def test_a_cached_domain_is_answered_in_the_process_with_no_round_trip(
    own_redis: RedisServer, dns_server: DnsServer, clock: ManualClock
) -> None:
    url = own_redis.url
    finder = provider_finder(url, servers=parse_servers(dns_server.servers), clock=clock)
    before = dns_server.queries("new.test")
    assert finder.provider_of("new.test") == Provider("google", KNOWN)
    own_redis.stop()
    # Had it asked Redis (down) it would have resolved again: the LRU answered alone.
    for _ in range(100):
        assert finder.provider_of("new.test") == Provider("google", KNOWN)
    assert dns_server.queries("new.test") == before + 1


def test_a_null_mx_makes_the_domain_its_own_provider(clock: ManualClock) -> None:
    with DnsServer([("nullmx.test", ".", 0)], ttl=TTL) as server:
        finder = _finder("memory://", server, clock)
        assert finder.provider_of("nullmx.test") == Provider("nullmx.test", IMPLICIT)
