"""One Limiter for every policy: a recipient-only policy and a scoped one through the same API,
on memory and a real Redis; the asyncio limiter and the pre-checks accept both."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from mailer import Limiter, ManualClock, Policy, Tier
from mailer.limits.aio import AsyncLimiter
from mailer.limits.precheck import aprecheck, precheck
from mailer.limits.stores.memory import SlidingMemoryStore
from mailer.limits.stores.redis import SlidingRedisStore
from mailer.limits.stores.scoped_memory import ScopedMemoryStore
from mailer.limits.stores.scoped_redis import ScopedRedisStore

PLAIN = "1/60s, 5/1h"
SCOPED = "recipient: 1/60s, 5/1h; sender: 2/1s gcra; tenant: 3/1d fixed"
ADA, BOB, CY = "ada@example.com", "bob@example.com", "cy@example.com"


def _limiter(url: str, text: str, clock: ManualClock) -> Limiter:
    policy = Policy.parse(text, name="recipient")
    namespace = f"shape-{uuid.uuid4().hex[:8]}"
    return Limiter.from_url(url, policy, clock=clock, secret="s", namespace=namespace)


@pytest.mark.parametrize("text", [PLAIN, SCOPED])
def test_every_policy_is_served_by_one_api(text: str, backend_url: str, clock: ManualClock) -> None:
    """Given either policy, acquire (tenant, mail id, wait, share, not_before), peek, room,
    storage_key, release and reset answer alike: the recipient's minute binds, a booking comes
    back for the same mail id, and a release frees the slot."""
    limiter = _limiter(backend_url, text, clock)
    try:
        first = limiter.acquire(ADA, tenant="acme", mail_id="m1", share=1.0)
        assert first.allowed and first.scope is None
        booked = limiter.acquire(ADA, tenant="acme", mail_id="m2", max_wait=120, share=0.7)
        assert booked.booked and booked.wait == 60.0
        assert (booked.scope, booked.tier) == ("recipient", Tier(1, 60_000))
        again = limiter.acquire(ADA, tenant="acme", mail_id="m2", max_wait=120)
        assert again.booked and again.at_ms == booked.at_ms, "the same mail gets its slot back"
        held = limiter.acquire(BOB, mail_id="m3", max_wait=600, not_before=clock.now + 5)
        assert held.booked and held.wait == 5.0
        assert limiter.peek(ADA, tenant="acme").wait == 120.0
        assert [room for _, room in limiter.room("recipient", ADA)] == [0, 3]
        assert limiter.storage_key("recipient", ADA) != limiter.storage_key("recipient", BOB)
        assert limiter.release(ADA, "m2", tenant="acme")
        assert not limiter.release(ADA, "m2", tenant="acme")
        assert limiter.peek(ADA, tenant="acme").wait == 60.0
        limiter.reset(ADA)
        assert limiter.peek(ADA, tenant="acme").allowed
        with pytest.raises(ValueError, match="has no scope 'domain'"):
            limiter.storage_key("domain", "example.com")
    finally:
        limiter.close()


def test_the_store_follows_the_url_and_the_policy_shape(
    backend_url: str, clock: ManualClock
) -> None:
    """Recipient sliding tiers alone get the single-key store; anything else the scoped one;
    the Redis client is exposed to share its pool (None in memory)."""
    plain, scoped = _limiter(backend_url, PLAIN, clock), _limiter(backend_url, SCOPED, clock)
    try:
        if backend_url.startswith("memory"):
            assert isinstance(plain.store, SlidingMemoryStore)
            assert isinstance(scoped.store, ScopedMemoryStore)
            assert plain.client is None and scoped.client is None
        else:
            assert isinstance(plain.store, SlidingRedisStore)
            assert isinstance(scoped.store, ScopedRedisStore)
            assert plain.client is not None and scoped.client is not None
        assert plain.url == scoped.url == backend_url
    finally:
        plain.close()
        scoped.close()


def test_a_scoped_policy_binds_its_shared_scopes(backend_url: str, clock: ManualClock) -> None:
    """Under the scoped policy the sender's gcra tier and a tenant's fixed tier bind across
    recipients; the plain policy counts each recipient alone."""
    plain, scoped = _limiter(backend_url, PLAIN, clock), _limiter(backend_url, SCOPED, clock)
    try:
        assert all(plain.acquire(r, tenant="acme").allowed for r in (ADA, BOB, CY))
        assert scoped.acquire(ADA, tenant="acme").allowed
        assert scoped.acquire(BOB, tenant="acme").allowed
        third = scoped.acquire(CY, tenant="acme")
        assert third.refused and third.scope == "sender" and str(third.tier) == "2/1s gcra"
        assert [room for _, room in scoped.room("tenant", "acme")] == [1]
    finally:
        plain.close()
        scoped.close()


def test_reset_of_everything_is_for_memory_only(backend_url: str, clock: ManualClock) -> None:
    """reset() forgets everything in memory; a shared Redis refuses it in one line."""
    for text in (PLAIN, SCOPED):
        limiter = _limiter(backend_url, text, clock)
        try:
            limiter.acquire(ADA)
            if backend_url.startswith("memory"):
                limiter.reset()
                assert limiter.acquire(ADA).allowed
            else:
                with pytest.raises(ValueError, match="one recipient at a time"):
                    limiter.reset()
        finally:
            limiter.close()


@pytest.mark.parametrize("text", [PLAIN, SCOPED])
def test_async_limiter_and_prechecks_serve_every_policy(
    text: str, backend_url: str, clock: ManualClock
) -> None:
    """The async limiter and the blocking one share one budget under either policy, and both
    pre-checks answer 429 from any binding scope (the sender's, for a tenant's mail)."""
    blocking = _limiter(backend_url, text, clock)
    policy = blocking.policy

    async def scenario() -> None:
        if backend_url.startswith("memory"):
            aio = AsyncLimiter.sharing(blocking)
        else:
            namespace = blocking.storage_key("recipient", ADA).split(":")[0]
            aio = AsyncLimiter.from_url(
                backend_url, policy, clock=clock, secret="s", namespace=namespace
            )
        try:
            assert (await aio.acquire(ADA, tenant="acme", mail_id="m1")).allowed
            assert blocking.peek(ADA, tenant="acme").wait == 60.0
            assert await aprecheck(aio, ADA, tenant="acme") == (429, {"Retry-After": "60"})
            assert precheck(blocking, ADA, tenant="acme") == (429, {"Retry-After": "60"})
            booked = await aio.acquire(ADA, tenant="acme", mail_id="m2", max_wait=120)
            assert booked.booked and await aio.release(ADA, "m2", tenant="acme")
            assert (await aio.acquire(BOB, tenant="acme")).allowed
            shared = (429, {"Retry-After": "1"}) if policy.scoped else (200, {})
            assert await aprecheck(aio, CY, tenant="acme") == shared
            assert precheck(blocking, CY, tenant="acme") == shared
            clock.advance(1)  # the sender's bucket refills; the recipient's minute does not
            assert not (await aio.peek(ADA)).allowed
            await aio.reset(ADA)
            assert (await aio.peek(ADA)).allowed
        finally:
            await aio.close()

    try:
        asyncio.run(scenario())
    finally:
        blocking.close()
