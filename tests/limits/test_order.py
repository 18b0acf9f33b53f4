"""A recipient's booked order follows the order its mails were sent: memory and Redis alike.

Runs race for the limiter (pool processes, workers): whichever asks first would book the
earlier slot. With an order stamp (:mod:`mailer.limits.ordering`) a booking takes the slot of
any future booking stamped after it, which moves one place back; the log's times never change,
so the policy holds as before. Checked by an independent checker (``order_checker``) on
simulated runs over an injected clock: 20 runs of 20 mails, the runs racing, some dying after
their booking (a killed worker's copy comes again), some a little late, and a limiter outage
in the middle of the stream.
"""

from __future__ import annotations

import heapq
import itertools
import random

import pytest
import redis

from devservers.redis_servers import RedisClusterServers
from mailer import Limiter, ManualClock, Policy
from mailer.limits.ordering import ORDER_GRACE_MS, check_order, keep_order, order_key
from mailer.limits.sliding_log import BOOKED
from tests.conftest import LimiterFactory
from tests.limits.order_checker import out_of_order, over_limit

ADA = "ada@example.com"
T0 = 1_700_000_000.0
LATE = 1.0  # s: the guard's late_after (MAILGUARD_LATE_TOLERANCE's default)


def _stamp(n: int, priority: int = 5) -> str:
    return order_key(priority, int(T0 * 1e6) + 1000 * n)


def _ask(limiter: Limiter, n: int, order: str | None = None) -> object:
    return limiter.acquire(
        ADA, mail_id=f"m{n}", max_wait=7200, late_after=LATE, order=order or _stamp(n)
    )


@pytest.mark.parametrize("runs", list(itertools.permutations((2, 3, 4))))
def test_readme_walk_mails_2_3_4_get_20s_40s_1h_whatever_order_their_runs_come(
    make_limiter: LimiterFactory, clock: ManualClock, runs: tuple[int, int, int]
) -> None:
    """README step 4 under ``1/20s, 3/1h``: mail 1 sent, mails 2, 3, 4 sent in turn and run in
    any order: they hold 20 s, 40 s and 1 h in their sending order; mail 2's own answer names
    the tier 1/20s and a 20 s wait, as the README shows."""
    limiter = make_limiter("1/20s, 3/1h")
    assert _ask(limiter, 1).allowed  # type: ignore[attr-defined]
    answers = {n: _ask(limiter, n) for n in runs}
    assert all(a.booked for a in answers.values())  # type: ignore[attr-defined]
    held = {n: _ask(limiter, n).at - T0 for n in (2, 3, 4)}  # type: ignore[attr-defined]
    assert held == {2: 20.0, 3: 40.0, 4: 3600.0}
    assert str(answers[2].tier) == "1/20s" and answers[2].wait == 20.0  # type: ignore[attr-defined]


def test_a_mail_moved_back_finds_its_later_slot_at_its_run_and_never_goes_early(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """Mail 3 booked first (+2 s), then mail 2 takes that slot: at +2 s mail 2 is admitted and
    mail 3, asking at its old slot, is told +4 s (booked, not sent); at +4 s it goes."""
    limiter = make_limiter("1/2s")
    assert _ask(limiter, 1).allowed  # type: ignore[attr-defined]
    assert _ask(limiter, 3).at == T0 + 2  # type: ignore[attr-defined]
    assert _ask(limiter, 2).at == T0 + 2  # type: ignore[attr-defined]
    clock.advance(2)
    assert _ask(limiter, 2).allowed  # type: ignore[attr-defined]
    again = _ask(limiter, 3)
    assert again.booked and again.at == T0 + 4  # type: ignore[attr-defined]
    clock.advance(2)
    assert _ask(limiter, 3).allowed  # type: ignore[attr-defined]


def test_a_higher_priority_mail_goes_ahead_of_lower_ones_booked_before_it(
    make_limiter: LimiterFactory,
) -> None:
    """The documented exception: the stamp sorts by kind priority first (a code, 9, before a
    newsletter, 1), then by sending order."""
    limiter = make_limiter("1/2s")
    assert _ask(limiter, 1).allowed  # type: ignore[attr-defined]
    _ask(limiter, 2, _stamp(2, priority=1))
    _ask(limiter, 3, _stamp(3, priority=1))
    assert _ask(limiter, 4, _stamp(4, priority=9)).at == T0 + 2  # type: ignore[attr-defined]
    assert _ask(limiter, 2, _stamp(2, priority=1)).at == T0 + 4  # type: ignore[attr-defined]


def test_unstamped_bookings_neither_move_nor_are_moved(make_limiter: LimiterFactory) -> None:
    """A booking without a stamp (a library call, an older producer's mail) keeps its slot."""
    limiter = make_limiter("1/2s")
    assert limiter.acquire(ADA, mail_id="a").allowed
    assert limiter.acquire(ADA, mail_id="plain", max_wait=60).at == T0 + 2
    assert _ask(limiter, 5).at == T0 + 4  # type: ignore[attr-defined]
    assert _ask(limiter, 2).at == T0 + 4, "stamped after 5: it waits behind it"  # type: ignore[attr-defined]
    assert limiter.acquire(ADA, mail_id="plain", max_wait=60).at == T0 + 2


def test_a_hold_keeps_its_mail_after_its_end() -> None:
    """``keep_order`` never gives a mail a slot before its ``not_before`` (a hold's end)."""
    ts, tags = [1000, 3000, 5000, 7000], [1, 2 | BOOKED, 3 | BOOKED, 4 | BOOKED]
    orders = {2: "b", 3: "c"}
    assert keep_order(ts, tags, orders, 3, "a", 1000, not_before_ms=4000) == 2
    assert tags == [1, 2 | BOOKED, 4 | BOOKED, 3 | BOOKED]
    assert orders == {2: "b", 3: "c", 4: "a"}


def test_stamps_are_checked() -> None:
    assert check_order("") == ""
    assert check_order(_stamp(1)) == _stamp(1)
    for bad in ("1" * 17, "a" * 18, 123, "\uff11" * 18):
        with pytest.raises(ValueError, match="order"):
            check_order(bad)
    with pytest.raises(ValueError, match="order stamp"):
        order_key(10, 1)
    assert order_key(9, 0) == ""


def _simulate(limiter: Limiter, clock: ManualClock, seed: int, mails: int = 20) -> dict[int, float]:
    """One stream of ``mails`` to one recipient under ``1/2s``: mail 0 sent first, then mails
    1.. sent in turn (stamps 1 ms apart), their first runs racing within 50 ms; a run that
    books runs again at its slot (up to 0.5 s late, now and then); one run in five dies after
    its booking and its copy comes at a random time before the slot (a killed worker); the
    limiter is down from +10 s to +20 s (runs then try again 1-3 s later). Returns when each
    mail was admitted, by its place in the sending order."""
    rnd = random.Random(seed)
    sent: dict[int, float] = {}
    queue: list[tuple[float, int, int]] = []
    tick = itertools.count()
    for n in range(mails + 1):
        heapq.heappush(queue, (T0 + (0 if n == 0 else 0.001 + rnd.random() * 0.05), next(tick), n))
    while queue:
        at, _, n = heapq.heappop(queue)
        clock.set(at)
        if T0 + 10 <= at < T0 + 20:  # the limiter is down: the run tries again later
            heapq.heappush(queue, (at + 1 + 2 * rnd.random(), next(tick), n))
            continue
        if n in sent:  # a copy of a run that admitted it: the ledger ends it as a repeat
            continue
        answer = _ask(limiter, n)
        if answer.allowed:  # type: ignore[attr-defined]
            sent[n] = at
            continue
        assert answer.booked, f"mail {n} refused"  # type: ignore[attr-defined]
        slot = answer.at  # type: ignore[attr-defined]
        late = rnd.random() * 0.5 if rnd.random() < 0.3 else 0.0
        heapq.heappush(queue, (slot + late, next(tick), n))
        if rnd.random() < 0.2:  # this run dies: the copy of its message comes before the slot
            heapq.heappush(queue, (at + (slot - at) * rnd.random(), next(tick), n))
    return sent


@pytest.mark.parametrize("seed", range(20))
def test_twenty_mails_racing_leave_in_their_sending_order(
    make_limiter: LimiterFactory, clock: ManualClock, seed: int
) -> None:
    """20 runs of 20 mails (see :func:`_simulate`): each mail admitted once, in its sending
    order, never two closer than the policy allows (the independent checker)."""
    sent = _simulate(make_limiter("1/2s"), clock, seed)
    assert sorted(sent) == list(range(21))
    assert out_of_order(sent) == []
    # a run up to LATE after its slot is admitted at it: sends are never closer than 2 s - LATE
    assert over_limit(list(sent.values()), [(1, 2.0)], slack=LATE) == []


def test_without_stamps_the_same_race_changes_the_order(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """The check has teeth: the same streams without stamps leave out of order (some seed)."""
    swapped = 0
    for seed in range(5):
        limiter = make_limiter("1/2s", namespace=f"plain{seed}")
        plain = _Unstamped(limiter)
        swapped += bool(out_of_order(_simulate(plain, clock, seed)))  # type: ignore[arg-type]
    assert swapped


class _Unstamped:
    """A limiter whose calls drop the stamp (the behaviour before stamps)."""

    def __init__(self, limiter: Limiter) -> None:
        self.limiter = limiter

    def acquire(self, recipient: str, **options: object) -> object:
        options.pop("order", None)
        return self.limiter.acquire(recipient, **options)  # type: ignore[arg-type]


def test_the_order_is_kept_on_a_redis_cluster(cluster: RedisClusterServers) -> None:
    """On Redis Cluster the stamps' hash shares its log's hash slot: the same exchange."""
    clock = ManualClock(T0)
    policy = Policy.parse("1/2s", name="recipient")
    limiter = Limiter.from_url(cluster.url, policy, secret="s", clock=clock, namespace="ordc")
    try:
        assert limiter.keeps_order
        assert _ask(limiter, 1).allowed  # type: ignore[attr-defined]
        assert _ask(limiter, 3).at == T0 + 2  # type: ignore[attr-defined]
        assert _ask(limiter, 2).at == T0 + 2  # type: ignore[attr-defined]
        assert _ask(limiter, 3).at == T0 + 4  # type: ignore[attr-defined]
        limiter.reset(ADA)
        assert limiter.peek(ADA).allowed
    finally:
        limiter.close()


def test_a_stamped_log_outlives_a_short_window_while_its_bookings_may_wait(
    redis_url: str,
) -> None:
    """Under ``1/2s`` a stamped log and its stamps' hash live 10 minutes past the newest
    entry (a booking reached in an outage still holds the mails stamped after it back)."""
    policy = Policy.parse("1/2s", name="recipient")
    limiter = Limiter.from_url(redis_url, policy, secret="s", clock=ManualClock(T0), namespace="t")
    client = redis.Redis.from_url(redis_url)

    def server_ms() -> int:
        seconds, micros = client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    try:
        before = server_ms()
        assert _ask(limiter, 1).allowed  # type: ignore[attr-defined]
        assert _ask(limiter, 2).booked  # type: ignore[attr-defined]
        after = server_ms()
        key = limiter.storage_key("recipient", ADA)
        slack = 3_600_000  # a simulated clock adds an hour to every TTL
        expires = client.pexpiretime(key)
        assert expires == client.pexpiretime(key + ":o")  # one expiry, absolute
        # Anchored on the server's clock around the writes, not on a read a loaded machine
        # may make seconds later.
        assert before + 2_000 + ORDER_GRACE_MS + slack - 1_000 < expires
        assert expires <= after + 2_000 + ORDER_GRACE_MS + slack
    finally:
        limiter.close()
        client.close()


def _stamped_trace(limiter: Limiter, clock: ManualClock, seed: int) -> list[tuple[object, ...]]:
    """A random trace of stamped calls on one recipient (bookings, runs early, on time and
    late, holds, releases, calls judging lateness or not): every answer."""
    rng = random.Random(seed)
    answers: list[tuple[object, ...]] = []
    for _ in range(200):
        clock.advance(rng.choice([0.0, 0.0004, 0.001, 0.4, 1.0, 2.0, 3.0, 7.0, 12.0]))
        n = rng.randrange(12)
        if rng.random() < 0.1:
            answers.append(("released", limiter.release(ADA, f"m{n}")))
            continue
        hold = rng.choice([None, None, None, clock.now + 5.0])
        d = limiter.acquire(
            ADA,
            mail_id=f"m{n}",
            max_wait=60,
            late_after=rng.choice([None, LATE, LATE]),
            not_before=hold,
            order=_stamp(n, priority=rng.choice([5, 5, 5, 9])),
        )
        answers.append((d.allowed, d.booked, d.at_ms, d.wait_ms, str(d.tier), d.remaining))
    return answers


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("tiers", ["1/2s, 3/10s", "1/2s", "2/1s, 4/20s"])
def test_memory_and_the_script_answer_stamped_traces_alike(
    redis_url: str, seed: int, tiers: str
) -> None:
    """The Lua script mirrors the memory store on stamped calls: the same answers, call by call."""
    policy = Policy.parse(tiers, name="recipient")
    answers = []
    for url in ("memory://", redis_url):
        clock = ManualClock(T0)
        namespace = f"tr{seed}-{len(tiers)}"
        limiter = Limiter.from_url(url, policy, secret="s", clock=clock, namespace=namespace)
        try:
            answers.append(_stamped_trace(limiter, clock, seed))
        finally:
            limiter.close()
    assert answers[0] == answers[1]
