"""One slot for several recipients (mailer.limits.multi): memory, a real Redis and a real Redis
Cluster, plain and scoped limiters."""

from __future__ import annotations

import uuid

import pytest

from mailer import Contended, Decision, Limiter, ManualClock, Policy
from mailer.limits.multi import MAX_ROUNDS, acquire_all, release_all

START = 1_700_000_000.0
KEYS = ["ada@example.com", "bob@example.com", "cy@example.com"]


@pytest.fixture(
    params=["memory", "redis", "cluster", "scoped-memory", "scoped-redis", "scoped-cluster"]
)
def limiter(request: pytest.FixtureRequest) -> tuple[Limiter, ManualClock]:
    clock = ManualClock(START)
    if "memory" in request.param:
        url = "memory://"
    elif "cluster" in request.param:
        url = request.getfixturevalue("cluster").url
    else:
        url = request.getfixturevalue("redis_url")
    namespace = f"multi-{uuid.uuid4().hex[:8]}"
    if request.param.startswith("scoped"):
        policy = Policy.parse("recipient: 1/60s, 3/1h; sender: 100/1s")
        made: Limiter = Limiter.from_url(url, policy, clock=clock, secret="s", namespace=namespace)
    else:
        policy = Policy.parse("1/60s, 3/1h", name="recipient")
        made = Limiter.from_url(url, policy, clock=clock, secret="s", namespace=namespace)
    request.addfinalizer(made.close)
    return made, clock


def test_a_message_waits_for_the_recipient_without_room(
    limiter: tuple[Limiter, ManualClock],
) -> None:
    """bob got a mail 20 s ago: a message to ada, bob and cy is booked for all three at bob's
    next slot (40 s), each recipient's log counting it once; release gives it back in all."""
    lim, clock = limiter
    assert lim.acquire("bob@example.com", mail_id="earlier").allowed
    clock.advance(20)
    d = acquire_all(lim, KEYS, mail_id="msg", max_wait=120)
    assert d.booked and d.wait == 40.0 and str(d.tier) == "1/1m"
    for key in KEYS:  # the same slot in every log, once
        assert lim.acquire(key, mail_id="msg").at_ms == d.at_ms
    again = acquire_all(lim, KEYS, mail_id="msg", max_wait=120)
    assert again.at_ms == d.at_ms, "a re-run gets the same slot and consumes nothing"
    assert release_all(lim, KEYS, "msg")
    assert lim.acquire("ada@example.com", mail_id="free").allowed, "ada's slot was given back"


def test_a_refusal_leaves_nothing_held_anywhere(
    limiter: tuple[Limiter, ManualClock],
) -> None:
    """cy's next slot is beyond max_wait: refused, and ada and bob hold nothing of it."""
    lim, _ = limiter
    assert lim.acquire("cy@example.com", mail_id="c1").allowed
    refused = acquire_all(lim, KEYS, mail_id="msg", max_wait=10)
    assert refused.refused and refused.wait == 60.0
    assert lim.acquire("ada@example.com").allowed and lim.acquire("bob@example.com").allowed


def test_every_recipient_with_room_goes_now(
    limiter: tuple[Limiter, ManualClock],
) -> None:
    lim, _ = limiter
    d = acquire_all(lim, KEYS, mail_id="msg")
    assert d.allowed
    assert all(lim.acquire(key).refused for key in KEYS), "each recipient's 1/60s is used"


def test_keys_must_be_given_and_distinct(
    limiter: tuple[Limiter, ManualClock],
) -> None:
    lim, _ = limiter
    with pytest.raises(ValueError, match="at least one key"):
        acquire_all(lim, [], mail_id="m")
    with pytest.raises(ValueError, match="distinct keys"):
        acquire_all(lim, ["a@x.example", "a@x.example"], mail_id="m")


class _Competitor:
    """A real limiter where, each time the message asks ``moved``'s key, another mail has just
    taken that key's next slot first (as a busy recipient's other mails would): the slot the
    message is offered keeps moving later."""

    def __init__(self, limiter: Limiter, moved: str) -> None:
        self.limiter, self.moved, self.others = limiter, moved, 0

    def acquire(
        self,
        key: str,
        *,
        mail_id: str | None = None,
        max_wait: float = 0.0,
        not_before: float | None = None,
    ) -> Decision:
        if key == self.moved:
            self.others += 1
            self.limiter.acquire(key, mail_id=f"other-{self.others}", max_wait=86_400)
        return self.limiter.acquire(key, mail_id=mail_id, max_wait=max_wait, not_before=not_before)

    def release(self, key: str, mail_id: str) -> bool:
        return self.limiter.release(key, mail_id)


def test_a_slot_that_never_settles_raises_contended_and_holds_nothing() -> None:
    """bob's slot moves every time the message asks (ada first, bob second): after
    ``MAX_ROUNDS`` rounds the call raises :class:`Contended` and ada's log holds nothing."""
    clock = ManualClock(START)
    policy = Policy.parse("1/60s", name="recipient")
    lim = Limiter.from_url("memory://", policy, clock=clock, secret="s")
    busy = _Competitor(lim, "bob@example.com")
    with pytest.raises(Contended, match=f"no common slot in {MAX_ROUNDS} rounds"):
        acquire_all(busy, ["ada@example.com", "bob@example.com"], mail_id="msg", max_wait=86_400)
    assert busy.others == MAX_ROUNDS
    assert lim.acquire("ada@example.com", mail_id="free").allowed, "ada holds nothing of msg"
