"""The usual Redis decision's work, in commands (INFO commandstats: machine-independent).

A mail decided now under a recipient-only policy is one EVALSHA whose script reads the
server's TIME and the recipient's log (GET) and, when it admits or books, writes it (SET):
nothing more, whatever the log holds. The quick path at the head of sliding_log.lua does this;
the behaviour behind it (bookings, late runs) is covered by the limiter's shared suites.
"""

from __future__ import annotations

import pytest
import redis

from mailer import Limiter, ManualClock, Policy
from mailer.limits.policy import REFERENCE_POLICY

REFERENCE = Policy.parse(REFERENCE_POLICY, name="recipient")


def _calls(client: redis.Redis) -> dict[str, int]:
    """Commands run since the last CONFIG RESETSTAT, the test's own left out."""
    stats = client.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    return {name: n for name, n in calls.items() if name not in {"config|resetstat", "hello"}}


def test_admitted_refused_and_booked_mails_cost_one_script_call_each(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    limiter = Limiter.from_url(redis_url, REFERENCE, secret="s")
    limiter.peek("warm@example.com")  # the script loaded, the connection open
    client.config_resetstat()
    assert limiter.acquire("ada@example.com", mail_id="m1").allowed
    assert _calls(client) == {"evalsha": 1, "time": 1, "get": 1, "set": 1}
    client.config_resetstat()
    assert limiter.acquire("ada@example.com", mail_id="m2").refused  # 1/60s: nothing written
    assert _calls(client) == {"evalsha": 1, "time": 1, "get": 1}
    client.config_resetstat()
    assert limiter.acquire("ada@example.com", mail_id="m3", max_wait=120).booked
    assert _calls(client) == {"evalsha": 1, "time": 1, "get": 1, "set": 1}
    limiter.close()
    client.close()


def test_an_admission_after_entries_expired_keeps_only_the_live_ones(redis_url: str) -> None:
    """The quick path appends to the stored log, or rewrites it when entries left the longest
    window: the value holds the live entries only (6 bytes of base, 10 per entry)."""
    clock = ManualClock(1_700_000_000.0)
    client = redis.Redis.from_url(redis_url)
    limiter = Limiter.from_url(redis_url, REFERENCE, clock=clock, secret="s")
    key = limiter.storage_key("recipient", "ada@example.com")
    assert limiter.acquire("ada@example.com", mail_id="a").allowed
    clock.advance(3_600)
    assert limiter.acquire("ada@example.com", mail_id="b").allowed
    assert len(client.get(key) or b"") == 6 + 2 * 10  # appended
    clock.advance(86_400 - 1_800)  # the first entry left the 24 h window, the second did not
    assert limiter.acquire("ada@example.com", mail_id="c").allowed
    assert len(client.get(key) or b"") == 6 + 2 * 10  # rewritten: b and c
    clock.advance(86_400)
    assert limiter.acquire("ada@example.com", mail_id="d").allowed
    assert len(client.get(key) or b"") == 6 + 10
    assert limiter.acquire("ada@example.com", mail_id="d").allowed  # its own admission again
    assert limiter.release("ada@example.com", mail_id="d")
    limiter.close()
    client.close()


def test_a_first_mail_and_the_argument_free_call_answer_as_the_long_form(redis_url: str) -> None:
    """A recipient with nothing kept takes the quick path's shortest branch (one SET of one
    entry, the room per tier compiled in); a call with no mail id and no wait sends no
    argument at all. Both answer as the long form (mode, clock, tag, max_wait) does."""
    client = redis.Redis.from_url(redis_url)
    limiter = Limiter.from_url(redis_url, REFERENCE, secret="s")
    store = limiter.store
    empty = limiter.peek("ada@example.com")
    assert (empty.allowed, empty.remaining) == (True, (1, 5, 10))
    client.config_resetstat()
    first = limiter.acquire("ada@example.com")  # no mail id, no wait: no argument sent
    assert _calls(client) == {"evalsha": 1, "time": 1, "get": 1, "set": 1}
    assert (first.allowed, first.booked, first.wait_ms, first.tier) == (True, False, 0, None)
    assert first.remaining == (0, 4, 9)
    key = limiter.storage_key("recipient", "ada@example.com")
    assert len(client.get(key) or b"") == 6 + 10
    assert 86_399_000 < client.pttl(key) <= 86_401_000
    again = limiter.acquire("ada@example.com")
    long_form = store._decision(  # type: ignore[attr-defined]
        client.evalsha(store.script_sha, 1, key, "a", "", 0, 0)  # type: ignore[attr-defined]
    )
    minute = REFERENCE.tiers[0]
    for decision in (again, long_form):
        assert (decision.allowed, decision.booked, decision.tier) == (False, False, minute)
        assert 59_000 < decision.wait_ms <= 60_001  # the admission is stored at now rounded up
        assert decision.remaining == (0, 4, 9)
    limiter.close()
    client.close()


@pytest.mark.parametrize("tiers", [1, 3, 16, 17, 120])
def test_the_quick_path_compiled_for_few_or_many_tiers_answers_as_memory(
    redis_url: str, tiers: int
) -> None:
    """compile_script unrolls the quick path's loops over the tiers up to UNROLLED_TIERS (two
    Lua locals a tier: a function may have 200) and keeps them as loops beyond."""
    policy = Policy.parse(", ".join(f"{i + 1}/{i + 1}m" for i in range(tiers)))
    clock = ManualClock(1_700_000_000.0)
    on_redis = Limiter.from_url(redis_url, policy, secret="s", clock=clock, namespace=f"t{tiers}")
    in_memory = Limiter.from_url("memory://", policy, clock=clock)
    for step in range(12):
        wait = 150 if step % 3 else 0
        assert on_redis.acquire("ada@example.com", max_wait=wait) == in_memory.acquire(
            "ada@example.com", max_wait=wait
        )
        assert on_redis.peek("ada@example.com") == in_memory.peek("ada@example.com")
        clock.advance(17.5)
    on_redis.close()
