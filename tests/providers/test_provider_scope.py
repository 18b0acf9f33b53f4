"""The provider scopes decided with the others, memory and a real Redis alike, each mail's
provider found from MX by a real DNS server on loopback (never the internet)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest

from devservers.dns_server import DnsServer
from devservers.redis_servers import RedisClusterServers
from mailer import Limiter, ManualClock, Policy
from mailer.limits.aio import AsyncLimiter
from mailer.providers import ProviderFinder, provider_finder
from mailer.providers.resolver import parse_servers

#: Three Google Workspace domains of the test DNS (MX at Google), and two at Microsoft.
WORKSPACE = ("shop.test", "new.test", "backup.test")
MICROSOFT = ("outlook.com", "contoso.test")

Make = Callable[..., Limiter]


@pytest.fixture
def finder(backend_url: str, dns_server: DnsServer, clock: ManualClock) -> ProviderFinder:
    """The finder as the workers build it, in the limiter's store, asking the test DNS."""
    return provider_finder(backend_url, servers=parse_servers(dns_server.servers), clock=clock)


@pytest.fixture
def make_limiter(backend_url: str, clock: ManualClock, finder: ProviderFinder) -> Iterator[Make]:
    """``make_limiter(policy)``: a limiter on the test's backend, clock and finder (closed)."""
    made: list[Limiter] = []

    def build(text: str, **options: object) -> Limiter:
        options.setdefault("providers", finder)
        limiter = Limiter.from_url(
            backend_url,
            Policy.parse(text),
            clock=clock,
            secret="s",
            namespace=f"prov-{uuid.uuid4().hex[:8]}",
            **options,  # type: ignore[arg-type]
        )
        made.append(limiter)
        return limiter

    yield build
    for limiter in made:
        limiter.close()


def test_a_named_provider_binds_every_one_of_its_domains_together(
    make_limiter: Make, clock: ManualClock
) -> None:
    """provider google: 2/1s: three Workspace domains (MX at Google) share Google's count, so
    the third mail is booked a second later; a mail to Outlook goes at once."""
    limiter = make_limiter("provider google: 2/1s")
    first, second, third = (
        limiter.acquire(f"ada@{domain}", mail_id=f"m-{domain}", max_wait=60) for domain in WORKSPACE
    )
    assert first.allowed and second.allowed
    assert third.booked and third.wait == 1.0
    assert (third.scope, str(third.tier)) == ("provider google", "2/1s")
    outlook = [limiter.acquire(f"bob@{domain}", max_wait=60) for domain in MICROSOFT * 3]
    assert all(d.allowed for d in outlook), "Microsoft has no limit of its own here"
    clock.advance(1.0)  # the third's slot: it and one more
    assert limiter.acquire("cy@gmail.com", max_wait=60).allowed
    assert limiter.acquire("dee@googlemail.com", max_wait=60).booked, "Google's as well"


def test_every_provider_keeps_its_own_count(make_limiter: Make) -> None:
    """provider: 1/1s: one mail per provider per second, each provider on its own count."""
    limiter = make_limiter("provider: 1/1s")
    answers = {
        domain: limiter.acquire(f"ada@{domain}", max_wait=60)
        for domain in ("gmail.com", "outlook.com", "yahoo.com", "corp.test", "nomx.test")
    }
    assert all(d.allowed for d in answers.values()), answers
    again = {
        domain: limiter.acquire(f"bob@{domain}", max_wait=60)
        for domain in ("shop.test", "contoso.test", "aol.com", "corp.test", "nomx.test")
    }
    assert all(d.booked and d.wait == 1.0 for d in again.values()), again
    assert {d.scope for d in again.values()} == {"provider"}


def test_a_named_provider_has_its_tiers_instead_of_every_providers(make_limiter: Make) -> None:
    """provider: 1/1s; provider google: 3/1s: Google gets three a second (not the one of
    every other provider), Microsoft one."""
    limiter = make_limiter("provider: 1/1s; provider google: 3/1s gcra")
    google = [limiter.acquire(f"r{i}@{d}", max_wait=60) for i, d in enumerate(WORKSPACE * 2)]
    assert [d.allowed for d in google] == [True, True, True, False, False, False]
    assert google[3].scope == "provider google"
    microsoft = [limiter.acquire(f"m@{d}", max_wait=60) for d in MICROSOFT]
    assert [d.allowed for d in microsoft] == [True, False]
    assert microsoft[1].scope == "provider"


def test_provider_scopes_decide_with_the_others_in_one_decision(
    make_limiter: Make, clock: ManualClock
) -> None:
    """recipient, sender and provider together: the latest of them binds; a refusal (past
    max_wait) consumes nothing in the provider scope."""
    limiter = make_limiter("recipient: 1/10s; sender: 3/1s; provider google: 1/1s")
    assert limiter.acquire("a@shop.test", mail_id="a1", max_wait=60).allowed
    booked = limiter.acquire("a@shop.test", mail_id="a2", max_wait=60)
    assert (booked.wait, booked.scope) == (10.0, "recipient")
    assert str(booked.tier) == "1/10s"
    refused = limiter.acquire("b@new.test", mail_id="b1", max_wait=0.5)
    assert refused.refused and refused.scope == "provider google"
    assert limiter.acquire("c@outlook.com", mail_id="c1").allowed
    clock.advance(1.0)
    assert limiter.acquire("b@new.test", mail_id="b1").allowed, "the refusal left nothing"


def test_a_release_gives_the_slot_back_in_the_provider_scope(
    make_limiter: Make, clock: ManualClock
) -> None:
    """A failed mail's slot is given back to its provider: the next Google mail goes now."""
    limiter = make_limiter("provider google: 2/1s fixed")
    clock.advance(0.25)  # not at a window's start (a slot there is not given back: a guess)
    assert limiter.acquire("a@shop.test", mail_id="a").allowed
    assert limiter.acquire("b@new.test", mail_id="b").allowed
    assert limiter.acquire("c@backup.test", mail_id="c", max_wait=60).booked
    assert limiter.release("b@new.test", "b")
    assert limiter.release("c@backup.test", "c")
    assert limiter.acquire("d@gmail.com", mail_id="d").allowed


def test_room_and_peek_show_a_providers_count(make_limiter: Make) -> None:
    """room() per provider scope (any provider's name, or the named one's); peek() reads the
    recipient's provider and consumes nothing."""
    limiter = make_limiter("provider: 5/1m fixed; provider google: 3/1s gcra, 100/1h fixed")
    limiter.acquire("a@shop.test")
    limiter.acquire("b@outlook.com")
    google = limiter.room("provider google", "google")
    assert [(str(t), n) for t, n in google] == [("3/1s gcra", 2), ("100/1h fixed", 99)]
    assert [n for _, n in limiter.room("provider", "microsoft")] == [4]
    assert [n for _, n in limiter.room("provider", "yahoo")] == [5]
    assert limiter.peek("z@new.test").remaining == (2, 99)
    assert [n for _, n in limiter.room("provider google", "google")] == [2, 99]


def test_a_cached_domain_asks_no_dns_and_no_provider_policy_never_asks(
    make_limiter: Make, dns_server: DnsServer
) -> None:
    """The first mail to a domain asks the DNS once; the next mails to it ask nothing (the
    finder's cache). A policy without provider tiers never asks for a provider."""
    limiter = make_limiter("provider google: 100/1s")
    before = dns_server.queries("shop.test")
    limiter.acquire("a@shop.test")
    asked = dns_server.queries("shop.test")
    assert asked > before
    for i in range(20):
        limiter.acquire(f"r{i}@shop.test", mail_id=f"m{i}")
        limiter.release(f"r{i}@shop.test", f"m{i}")
    assert dns_server.queries("shop.test") == asked

    class Refuses:
        def provider_of(self, domain: str) -> object:
            raise AssertionError(f"asked for {domain}'s provider")

    plain = make_limiter("recipient: 1/1s; domain: 5/1s", providers=Refuses())
    assert plain.acquire("a@shop.test", mail_id="x").allowed
    assert plain.peek("b@shop.test").allowed and plain.release("a@shop.test", "x")
    assert plain.acquire_many(["c@shop.test", "d@new.test"])[1].allowed


def test_acquire_many_counts_each_recipient_under_its_provider(make_limiter: Make) -> None:
    """acquire_many finds each recipient's provider, or takes them given."""
    limiter = make_limiter("provider google: 2/1s")
    answers = limiter.acquire_many([f"r@{d}" for d in WORKSPACE], max_wait=60)
    assert [d.allowed for d in answers] == [True, True, False]
    given = limiter.acquire_many(["a@corp.test", "b@corp.test"], providers=["google", None])
    assert [d.allowed for d in given] == [False, True]


def test_concurrent_mails_never_go_over_a_providers_tiers(
    make_limiter: Make, finder: ProviderFinder
) -> None:
    """Four threads book 60 mails to Google's domains at once: no second-long window holds
    more than the tier's 5, and none is refused within the wait. (The domains are known
    first: a domain whose lookup another caller is making counts as its own provider.)"""
    limiter = make_limiter("provider google: 5/1s; provider: 2/1s")
    assert {finder.provider_of(domain).name for domain in WORKSPACE} == {"google"}
    slots: list[int] = []
    lock = threading.Lock()

    def send(worker: int) -> None:
        for i in range(15):
            domain = WORKSPACE[i % 3]
            decision = limiter.acquire(
                f"w{worker}-{i}@{domain}", mail_id=f"{worker}-{i}", max_wait=60
            )
            assert not decision.refused
            with lock:
                slots.append(decision.at_ms)

    threads = [threading.Thread(target=send, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    slots.sort()
    assert len(slots) == 60
    assert all(slots[i + 5] - slots[i] >= 1000 for i in range(len(slots) - 5)), "over 5/1s"
    assert slots[-1] - slots[0] >= 11_000, "60 mails at 5 a second span 11 s at least"


def test_redis_cluster_decides_provider_scopes_scope_by_scope(
    cluster: RedisClusterServers, dns_server: DnsServer, clock: ManualClock
) -> None:
    """On Redis Cluster the provider scopes are shared scopes like the others, decided scope
    by scope (each in its own slot): the same answers as one Redis, a release included."""
    servers = parse_servers(dns_server.servers)
    finder = provider_finder(cluster.url, servers=servers, clock=clock)
    limiter = Limiter.from_url(
        cluster.url,
        Policy.parse("recipient: 5/1s; sender: 10/1s; provider: 1/1s; provider google: 2/1s"),
        clock=clock,
        secret="s",
        namespace=f"prov-{uuid.uuid4().hex[:8]}",
        providers=finder,
    )
    try:
        google = [limiter.acquire(f"a@{d}", mail_id=d, max_wait=60) for d in WORKSPACE]
        assert [d.allowed for d in google] == [True, True, False]
        assert (google[2].wait, google[2].scope) == (1.0, "provider google")
        microsoft = [limiter.acquire(f"b@{d}", mail_id=d, max_wait=60) for d in MICROSOFT]
        assert [d.allowed for d in microsoft] == [True, False]
        assert microsoft[1].scope == "provider"
        assert limiter.release("a@backup.test", "backup.test")
        assert limiter.release("a@new.test", "new.test")
        assert limiter.acquire("c@gmail.com", mail_id="c").allowed
    finally:
        limiter.close()


def test_the_async_limiter_counts_a_given_provider_with_the_blocking_ones(
    backend_url: str, clock: ManualClock, finder: ProviderFinder
) -> None:
    """AsyncLimiter takes the provider given (it asks no DNS from the event loop): its Google
    mails and the blocking limiter's, found from MX, share Google's count."""
    policy = Policy.parse("provider google: 2/1s")
    namespace = f"prov-{uuid.uuid4().hex[:8]}"
    blocking = Limiter.from_url(
        backend_url, policy, clock=clock, secret="s", namespace=namespace, providers=finder
    )
    if backend_url == "memory://":
        aio = AsyncLimiter.sharing(blocking)
    else:
        aio = AsyncLimiter.from_url(
            backend_url, policy, clock=clock, secret="s", namespace=namespace
        )

    async def scenario() -> None:
        assert (await aio.acquire("a@shop.test", mail_id="a", provider="google")).allowed
        assert blocking.acquire("b@new.test", mail_id="b").allowed
        third = await aio.acquire("c@gmail.com", mail_id="c", max_wait=60, provider="google")
        assert third.booked and third.scope == "provider google"
        assert (await aio.peek("d@x.example", provider="google")).wait == 1.0
        assert (await aio.peek("d@x.example")).allowed, "no provider given: its own"
        assert await aio.release("c@gmail.com", "c", provider="google")
        await aio.close()

    try:
        asyncio.run(scenario())
    finally:
        blocking.close()
