"""The asyncio limiter (mailer/aio.py) and the async pre-check, on memory and a real Redis.

An ``AsyncLimiter`` and the workers' blocking ``Limiter`` built with the same URL, policy and
secret share one budget: what one admits, the other sees. Times come from a manual clock.
"""

from __future__ import annotations

import asyncio

import pytest

from mailer import BackendUnavailable, Limiter, ManualClock, Policy
from mailer.limits.aio import AsyncLimiter
from mailer.limits.precheck import aprecheck, precheck
from mailer.mail.address import normalise_address

POLICY = Policy.parse("1/60s, 5/1h", name="recipient")
ADA = "ada@example.com"


def pair(url: str, clock: ManualClock) -> tuple[AsyncLimiter, Limiter]:
    """An async and a blocking limiter on the same storage (the memory one: shared backend)."""
    blocking = Limiter.from_url(url, POLICY, clock=clock, secret="s")
    if url.startswith("memory:"):
        return AsyncLimiter.sharing(blocking), blocking
    return AsyncLimiter.from_url(url, POLICY, clock=clock, secret="s"), blocking


def test_async_and_blocking_limiters_share_one_budget(backend_url: str, clock: ManualClock) -> None:
    """The async limiter admits, the blocking one is refused for the rest of the minute (and the
    other way round); a booking and its release behave as the blocking limiter's do."""

    async def scenario() -> None:
        aio, blocking = pair(backend_url, clock)
        try:
            first = await aio.acquire(ADA, mail_id="m1")
            assert first.allowed
            assert blocking.peek(ADA).wait == 60.0
            booked = await aio.acquire(ADA, mail_id="m2", max_wait=120)
            assert booked.booked and booked.at == clock.now + 60
            assert (await aio.peek(ADA)).wait == 120.0
            assert await aio.release(ADA, "m2")
            assert not await aio.release(ADA, "m2")
            clock.advance(60)
            assert blocking.acquire("bob@example.com").allowed
            assert (await aio.peek("bob@example.com")).wait == 60.0
            await aio.reset(ADA)
            assert (await aio.peek(ADA)).allowed
        finally:
            await aio.close()
            blocking.close()

    asyncio.run(scenario())


def test_the_async_precheck_answers_as_the_blocking_one(
    backend_url: str, clock: ManualClock
) -> None:
    """200, then 429 with Retry-After, then 400 for a bad address: the same as ``precheck``."""

    async def scenario() -> None:
        aio, blocking = pair(backend_url, clock)
        try:
            assert await aprecheck(aio, ADA) == (200, {}) == precheck(blocking, ADA)
            await aio.acquire(normalise_address("Ada+news@Example.com").limit_key)
            assert await aprecheck(aio, ADA) == (429, {"Retry-After": "60"})
            assert precheck(blocking, ADA) == (429, {"Retry-After": "60"})
            assert await aprecheck(aio, ADA, max_wait=60) == (200, {})
            assert await aprecheck(aio, "not an address") == (400, {})
            with pytest.raises(ValueError, match="max_wait"):
                await aprecheck(aio, ADA, max_wait=-1)
        finally:
            await aio.close()
            blocking.close()

    asyncio.run(scenario())


def test_unsupported_urls_and_an_unreachable_redis_are_clear() -> None:
    """Cluster and Sentinel URLs are refused in one line; a Redis that is down raises
    ``BackendUnavailable`` naming it (no traceback of the client's internals)."""
    for url in ("redis+cluster://127.0.0.1:7000", "redis+sentinel://127.0.0.1:26379/m", "x://"):
        with pytest.raises(ValueError, match="AsyncLimiter cannot use"):
            AsyncLimiter.from_url(url, POLICY)

    async def scenario() -> None:
        aio = AsyncLimiter.from_url("redis://127.0.0.1:1/0", POLICY, secret="s")
        try:
            with pytest.raises(BackendUnavailable, match=r"127\.0\.0\.1:1"):
                await aio.peek(ADA)
        finally:
            await aio.close()

    asyncio.run(scenario())
