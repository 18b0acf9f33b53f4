"""The scoped limiter's contract, case by case, in process (the properties test covers Redis)."""

from __future__ import annotations

import pytest

from mailer import ManualClock, Policy
from mailer.scoped import ScopedLimiter

START = 1_700_000_000.0


def _limiter(text: str) -> tuple[ScopedLimiter, ManualClock]:
    clock = ManualClock(START)
    return ScopedLimiter(Policy.parse(text), clock=clock, secret="s"), clock


def test_sender_scope_paces_mails_to_many_recipients() -> None:
    """sender: 4/2s: 12 mails to 12 recipients are booked 4 per 2 s, in order."""
    limiter, _ = _limiter("sender: 4/2s")
    slots = [
        limiter.acquire(f"r{i}@example.com", mail_id=f"m{i}", max_wait=60).at_ms for i in range(12)
    ]
    base = int(START * 1000)
    assert [s - base for s in slots] == [0] * 4 + [2000] * 4 + [4000] * 4


def test_a_bulk_kind_with_half_share_leaves_room_for_a_code_mail() -> None:
    """A burst of a share-0.5 kind fills only half of each sender window; code goes at once.

    (A fixed tier: in a sliding tier a code mail still queues behind bulk mails already booked,
    as a shared sliding log keeps its mails in order; see docs/scopes.md.)
    """
    limiter, _ = _limiter("sender: 4/1s fixed")
    bulk = [limiter.acquire(f"b{i}@example.com", max_wait=60, share=0.5) for i in range(6)]
    assert [d.allowed for d in bulk] == [True, True, False, False, False, False]
    assert all(d.booked for d in bulk[2:])
    code = limiter.acquire("ada@example.com")
    assert code.allowed


def test_refusal_consumes_nothing_in_any_scope() -> None:
    """A mail refused by the domain scope leaves the sender's and the recipient's room alone."""
    limiter, _ = _limiter("recipient: 5/1s; domain: 1/1s; sender: 2/1s")
    assert limiter.acquire("a@x.example").allowed
    refused = limiter.acquire("b@x.example")
    assert refused.refused and (refused.scope, str(refused.tier)) == ("domain", "1/1s")
    assert limiter.acquire("c@y.example").allowed  # the sender still had room for one more
    assert limiter.acquire("d@z.example").refused


def test_release_gives_the_slot_back_in_every_scope() -> None:
    """release returns a booked mail's slot to the recipient, the sender and the tenant."""
    limiter, _ = _limiter("recipient: 2/1s; sender: 1/1s gcra; tenant: 1/1d fixed")
    assert limiter.acquire("a@x.example", mail_id="m1", tenant="acme").allowed
    assert limiter.release("a@x.example", "m1", tenant="acme")
    assert limiter.acquire("b@x.example", tenant="acme").allowed


def test_same_mail_id_gets_its_slot_back_and_consumes_nothing() -> None:
    """Acquiring again with the same mail id returns the booked slot, nothing more is taken."""
    limiter, _ = _limiter("sender: 1/1s")
    limiter.acquire("a@x.example")
    first = limiter.acquire("b@x.example", mail_id="m", max_wait=10)
    again = limiter.acquire("b@x.example", mail_id="m", max_wait=10)
    assert first.booked and again.booked and again.at_ms == first.at_ms
    assert limiter.acquire("c@x.example", max_wait=10).at_ms == first.at_ms + 1000


def test_shared_scopes_are_refused_on_a_cluster_url() -> None:
    """A Redis Cluster URL with a sender scope is refused in one line, before any connection."""
    with pytest.raises(ValueError, match="not supported yet"):
        ScopedLimiter(Policy.parse("sender: 1/1s"), url="redis+cluster://127.0.0.1:1")


@pytest.mark.parametrize("share", [0, 1.5, float("nan"), True])
def test_bad_share_is_refused(share: float) -> None:
    """A share outside (0, 1] is refused naming it."""
    limiter, _ = _limiter("sender: 1/1s")
    with pytest.raises(ValueError, match="share must be a number in"):
        limiter.acquire("a@x.example", share=share)


@pytest.mark.parametrize("tenant", ["", "x" * 65, "ac\nme", "a\x00", 42])
def test_bad_tenant_is_refused_in_one_line(tenant: object) -> None:
    """A tenant that is not 1-64 characters without control characters is refused."""
    limiter, _ = _limiter("tenant: 1/1d fixed")
    with pytest.raises(ValueError, match="tenant must"):
        limiter.acquire("a@x.example", tenant=tenant)  # type: ignore[arg-type]
