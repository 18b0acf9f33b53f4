"""The web pre-check (mailer/precheck.py): 200, 429 with Retry-After, or 400; never consumes.

Every test runs on the memory backend and on a real redis-server, with a manual clock.
"""

from __future__ import annotations

import math

import pytest

from mailer import Kinds, ManualClock
from mailer.factory import memory_guard
from mailer.guard import Finish, MailRequest
from mailer.limits.precheck import precheck
from mailer.mail.address import normalise_address
from mailer.mail.transports import MemoryTransport
from mailer.records.ledger import MemoryLedger
from tests.conftest import LimiterFactory

ADA = "ada@example.com"


def key(address: str) -> str:
    """The limit key the worker's guard uses for ``address``."""
    return normalise_address(address).limit_key


def test_a_fresh_recipient_is_allowed(make_limiter: LimiterFactory) -> None:
    """Nothing sent yet: 200 and no headers."""
    limiter = make_limiter("1/60s, 5/1h")
    assert precheck(limiter, ADA) == (200, {})


def test_after_a_send_by_the_guard_it_answers_429(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """A mail the guard sent to Ada makes the pre-check answer 429 with Retry-After 60."""
    limiter = make_limiter("1/60s, 5/1h")
    transport = MemoryTransport()
    guard = memory_guard(
        limiter, MemoryLedger(clock), transport, kinds=Kinds.defaults(), clock=clock
    )
    step = guard.process(MailRequest(to=ADA, mail_id="m1", subject="Your code", body="493112"))
    assert isinstance(step, Finish) and step.outcome.status == "sent"
    assert len(transport.sent) == 1
    assert precheck(limiter, ADA) == (429, {"Retry-After": "60"})


def test_retry_after_is_exact_whole_seconds_rounded_up(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """Retry-After is the limiter's exact wait rounded up to whole seconds, and 200 once it ends."""
    limiter = make_limiter("1/60s, 5/1h")
    assert limiter.acquire(key(ADA)).allowed
    clock.advance(0.25)  # 59.75 s left
    assert precheck(limiter, ADA) == (429, {"Retry-After": "60"})
    clock.advance(58.749)  # 1.001 s left
    assert precheck(limiter, ADA) == (429, {"Retry-After": "2"})
    clock.advance(0.002)  # 0.999 s left
    assert precheck(limiter, ADA) == (429, {"Retry-After": "1"})
    assert limiter.peek(key(ADA)).wait_ms == 999
    clock.advance(0.999)
    assert precheck(limiter, ADA) == (200, {})


def test_retry_after_follows_the_binding_tier(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """After five sends a minute apart, the hourly tier binds: 3600 - 240 s after the first."""
    limiter = make_limiter("1/60s, 5/1h")
    for _ in range(5):
        assert limiter.acquire(key(ADA)).allowed
        clock.advance(60)
    status, headers = precheck(limiter, ADA)
    # The fifth send was at +240 s and the clock is now at +300 s: the hour ends at +3600 s.
    assert (status, headers) == (429, {"Retry-After": str(3600 - 300)})
    decision = limiter.peek(key(ADA))
    assert decision.tier == limiter.policy.tiers[1]
    assert headers["Retry-After"] == str(math.ceil(decision.wait_ms / 1000))


def test_fractional_window_rounds_up(make_limiter: LimiterFactory) -> None:
    """A 1.5 s wait is announced as 2 s: a client that waits Retry-After is never early."""
    limiter = make_limiter("1/1.5s")
    assert limiter.acquire(key(ADA)).allowed
    assert precheck(limiter, ADA) == (429, {"Retry-After": "2"})


def test_the_limit_key_closes_the_plus_tag_bypass(make_limiter: LimiterFactory) -> None:
    """``Ada+1@Example.com`` is limited together with ``ada@example.com``; Bob is not."""
    limiter = make_limiter("1/60s")
    assert limiter.acquire(key(ADA)).allowed
    assert precheck(limiter, "Ada+1@Example.com") == (429, {"Retry-After": "60"})
    assert precheck(limiter, " ADA+newsletter@example.COM ") == (429, {"Retry-After": "60"})
    assert precheck(limiter, "bob@example.com") == (200, {})
    limiter.reset(key(ADA))
    assert limiter.acquire(key("Ada+shop@example.com")).allowed
    assert precheck(limiter, ADA) == (429, {"Retry-After": "60"})


@pytest.mark.parametrize(
    "address",
    [
        "",
        "ada@",
        "not an address",
        "ada@example.com\r\nBcc: eve@example.com",
        "Ada <ada@x.com>",
        42,
    ],
)
def test_an_invalid_address_is_400(make_limiter: LimiterFactory, address: object) -> None:
    """An address the worker would drop (bad syntax, header injection, not a str) is a 400."""
    limiter = make_limiter("1/60s")
    assert precheck(limiter, address) == (400, {})  # type: ignore[arg-type]


def test_precheck_never_consumes(make_limiter: LimiterFactory, clock: ManualClock) -> None:
    """Many pre-checks leave the whole budget to the worker, and a refusal does not extend it."""
    limiter = make_limiter("2/60s")
    for _ in range(50):
        assert precheck(limiter, ADA) == (200, {})
    assert limiter.acquire(key(ADA)).allowed
    assert limiter.acquire(key(ADA)).allowed
    answers = {precheck(limiter, ADA)[1]["Retry-After"] for _ in range(50)}
    assert answers == {"60"}
    clock.advance(60)
    assert precheck(limiter, ADA) == (200, {})
    assert limiter.acquire(key(ADA)).allowed


def test_max_wait_matches_what_the_worker_would_book(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """With the kind's max_wait, 200 means the worker would book the slot; beyond it, 429."""
    limiter = make_limiter("1/60s")
    assert limiter.acquire(key(ADA)).allowed
    clock.advance(10)  # 50 s left
    assert precheck(limiter, ADA, max_wait=50) == (200, {})
    assert precheck(limiter, ADA, max_wait=49.999) == (429, {"Retry-After": "50"})
    assert not limiter.acquire(key(ADA), mail_id="m2", max_wait=49.999).booked
    assert limiter.acquire(key(ADA), mail_id="m2", max_wait=50).booked


def test_a_bad_max_wait_is_refused(make_limiter: LimiterFactory) -> None:
    """A negative or NaN max_wait is a programming error, not a status."""
    limiter = make_limiter("1/60s")
    for bad in (-1.0, math.nan, 8 * 86_400.0):
        with pytest.raises(ValueError, match="max_wait"):
            precheck(limiter, ADA, max_wait=bad)
