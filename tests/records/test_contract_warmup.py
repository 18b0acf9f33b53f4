"""The warm-up record's contract, run on memory and on a real Redis (``lua/take.lua``): day 1
from the first mail, the day's allowance, waiting mails in order, a transactional mail counted
but never waiting, a mail run again not counted twice, an idle sender starting over, and no
address in a key; then both stores answer a random trace alike. Time is a
:class:`ManualClock`: no test waits through a day."""

from __future__ import annotations

import random

import pytest
import redis

from mailer import ManualClock
from mailer.records.warmup import DAY, Warmup, parse_plans, warmup_from_url

PLANS = "news@example.org: 3, 5; example.org: 2"


@pytest.fixture
def warmup(backend_url: str, clock: ManualClock) -> Warmup:
    return warmup_from_url(backend_url, parse_plans(PLANS), clock=clock)


def test_day_one_allows_its_allowance_and_the_rest_waits_in_order(
    warmup: Warmup, clock: ManualClock
) -> None:
    """Five mails on a 3, 5 plan: three counted, two waiting (places 1 and 2) for day 2,
    which starts a day after the first mail."""
    start = clock()
    taken = [warmup.take("News <News@Example.org>", f"m{n}") for n in range(5)]
    assert [t is not None and t.admitted for t in taken] == [True, True, True, False, False]
    assert [t.position for t in taken if t is not None] == [0, 0, 0, 1, 2]
    last = taken[-1]
    assert last is not None and (last.day, last.allowance, last.used, last.waiting) == (1, 3, 3, 2)
    assert last.next_day == start + DAY
    clock.advance(DAY)
    again = [warmup.take("news@example.org", f"m{n}") for n in (3, 4)]
    assert [t is not None and (t.admitted, t.day, t.used) for t in again] == [
        (True, 2, 1),
        (True, 2, 2),
    ]


def test_a_transactional_mail_is_counted_and_never_waits(warmup: Warmup) -> None:
    """The allowance used: a forced mail still goes (and counts), the next plain one waits."""
    for n in range(3):
        warmup.take("news@example.org", f"m{n}")
    code = warmup.take("news@example.org", "code-1", force=True)
    assert code is not None and code.admitted and code.used == 4
    after = warmup.take("news@example.org", "m9")
    assert after is not None and not after.admitted


def test_a_mail_run_again_is_not_counted_twice(warmup: Warmup, clock: ManualClock) -> None:
    """A mail counted (then booked by the limiter) runs again, even after midnight: admitted,
    not counted; a waiting mail asked again keeps its place."""
    first = warmup.take("orders@example.org", "a")
    clock.advance(DAY - 1)
    assert warmup.take("orders@example.org", "b") is not None
    waits = warmup.take("orders@example.org", "c")
    assert waits is not None and (waits.admitted, waits.position) == (False, 1)
    again = warmup.take("orders@example.org", "c")
    assert again is not None and (again.admitted, again.position, again.waiting) == (False, 1, 1)
    clock.advance(2)
    rerun = warmup.take("orders@example.org", "a")
    assert first is not None and first.admitted
    assert rerun is not None and rerun.admitted and (rerun.day, rerun.used) == (2, 0)


def test_a_domain_plan_counts_its_addresses_together_and_others_pass(warmup: Warmup) -> None:
    """``example.org: 2``: two addresses of the domain share it; another domain has no plan."""
    assert warmup.take("a@example.org", "1") is not None
    second = warmup.take("b@example.org", "2")
    assert second is not None and second.admitted and second.used == 2
    third = warmup.take("c@example.org", "3")
    assert third is not None and not third.admitted
    assert warmup.take("x@elsewhere.org", "4") is None


def test_an_idle_sender_starts_over_on_day_one(warmup: Warmup, clock: ManualClock) -> None:
    """Day 2 reached, then 30 days without a mail: day 1 again, its allowance fresh."""
    warmup.take("news@example.org", "m1")
    clock.advance(DAY + 1)
    assert (t := warmup.take("news@example.org", "m2")) is not None and t.day == 2
    clock.advance(30 * DAY - 1)
    assert warmup.standing("news@example.org").day == 32
    clock.advance(1)
    assert warmup.standing("news@example.org").day == 0
    taken = warmup.take("news@example.org", "m3")
    assert taken is not None and (taken.day, taken.used, taken.start) == (1, 1, clock())


def test_past_the_plan_the_sender_is_warm(warmup: Warmup, clock: ManualClock) -> None:
    """Day 3 of a two-day plan: no allowance, every mail counted and admitted."""
    warmup.take("news@example.org", "m0")
    clock.advance(2 * DAY)
    taken = [warmup.take("news@example.org", f"m{n}") for n in range(1, 20)]
    assert all(t is not None and t.admitted and t.allowance is None for t in taken)


def test_the_standing_reads_without_counting(warmup: Warmup, clock: ManualClock) -> None:
    """``standing``: not started (day 0, day 1's allowance), then the day, used and waiting;
    on a new day used and waiting read 0 before any mail."""
    assert warmup.standing("example.org").day == 0
    assert warmup.standing("example.org").allowance == 2
    for n in range(4):
        warmup.take("a@example.org", f"m{n}")
    standing = warmup.standing("example.org")
    assert (standing.day, standing.allowance, standing.used, standing.waiting) == (1, 2, 2, 2)
    clock.advance(DAY)
    standing = warmup.standing("example.org")
    assert (standing.day, standing.allowance, standing.used, standing.waiting) == (2, None, 0, 0)


def test_redis_keys_name_no_address(redis_url: str, clock: ManualClock) -> None:
    """Every key is under ``{warmup}`` and names the sender by its hash."""
    warmup = warmup_from_url(redis_url, parse_plans(PLANS), clock=clock)
    for n in range(5):
        warmup.take("news@example.org", f"m{n}")
    keys = sorted(k.decode() for k in redis.Redis.from_url(redis_url).keys("*"))
    assert len(keys) == 2 and all(k.startswith("mailguard:{warmup}:") for k in keys), keys
    assert not any("example" in k or "news" in k for k in keys)


def _trace(url: str, seed: int) -> list[object]:
    """A random trace of mails (some run again, some transactional) over 40 days, with gaps
    up to 35 days: every answer and standing."""
    rng = random.Random(seed)
    clock = ManualClock(1_700_000_000.0)
    warmup = warmup_from_url(url, parse_plans("s@example.org: 2, 3, 5, 8"), clock=clock)
    answers: list[object] = []
    for n in range(300):
        clock.advance(
            rng.choice([0.0, 0.5, 3600.0, DAY / 3, DAY, 31 * DAY * (rng.random() < 0.02)])
        )
        mail = f"m{rng.randrange(n + 1)}" if rng.random() < 0.3 else f"m{n}"
        answers.append(warmup.take("s@example.org", mail, force=rng.random() < 0.1))
        answers.append(warmup.standing("s@example.org"))
    return answers


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_memory_and_redis_answer_a_random_trace_alike(redis_url: str, seed: int) -> None:
    """The same trace on both stores: the same answers, mail by mail."""
    redis.Redis.from_url(redis_url).flushall()
    assert _trace("memory://", seed) == _trace(redis_url, seed)
