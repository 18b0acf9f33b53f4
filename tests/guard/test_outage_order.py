"""Order survives an outage: a recipient's late mails come back in their booked order.

A recipient has several booked mails when every worker stops; when one starts again all their
slots have passed and their runs come back in whatever order the broker hands them out. The
earliest booking goes first; each next one a spacing after the one before, never closer
(by ``admitted_at``, the admission time on the limiter's clock, less the tolerance) and never
further than the policy requires. Through the guard on the memory limiter (a property over
every arrival order) and the Redis one (its Lua script), with an injected clock. The same
through a real worker stopped and started again: tests/workers/celery/test_outage_order_worker.py.
"""

from __future__ import annotations

import heapq
import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mailer import Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import Finish, GuardConfig, Later, MailRequest
from mailer.guard.engine import Guard
from mailer.mail.transports import MemoryTransport
from mailer.records.ledger import MemoryLedger

ADA = "ada@example.com"
POLICY = "1/60s, 5/1h, 50/1d"
SPACING = 60.0
TOLERANCE = 1.0
BOOKED = 4  # mails booked behind the first, 60 s apart
OUTAGE = 210.0  # s after the last slot: the worker stopped 3.5 minutes


def make_guard(backend_url: str, clock: ManualClock) -> Guard:
    policy = Policy.parse(POLICY, name="recipient")
    secret = None if backend_url == "memory://" else "s"
    limiter = Limiter.from_url(backend_url, policy, clock=clock, secret=secret, namespace="order")
    assert limiter.judges_lateness
    config = GuardConfig(late_tolerance=TOLERANCE)
    return memory_guard(
        limiter, MemoryLedger(clock), MemoryTransport(), kinds=Kinds.defaults(), config=config,
        clock=clock,
    )  # fmt: skip


def mail(n: int) -> MailRequest:
    return MailRequest(to=ADA, mail_id=f"m{n}", subject=f"m{n}", body="b")


def after_outage(
    guard: Guard, clock: ManualClock, arrival: list[int], gaps: list[float]
) -> tuple[list[tuple[int, float]], dict[int, float]]:
    """m0 sent, m1..m4 booked; every slot passes; their runs arrive in ``arrival`` order,
    ``gaps`` seconds apart, each following its countdowns: ``(mail, admitted_at)`` in the
    order they were sent, and when each mail's run first came back."""
    assert isinstance(guard.process(mail(0)), Finish)
    steps = {n: guard.process(mail(n)) for n in range(1, BOOKED + 1)}
    last_slot = max(s.outcome.due or 0.0 for s in steps.values())
    clock.set(last_slot + OUTAGE)
    queue: list[tuple[float, int]] = []
    at = clock.now
    came: dict[int, float] = {}
    for n, gap in zip(arrival, gaps, strict=True):
        at += gap
        came[n] = at
        heapq.heappush(queue, (at, n))
    sent: list[tuple[int, float]] = []
    while queue:
        at, n = heapq.heappop(queue)
        clock.set(max(clock.now, at))
        step = steps[n]
        assert isinstance(step, Later)
        result = guard.process(mail(n), step.progress)
        steps[n] = result
        if isinstance(result, Later):
            heapq.heappush(queue, (clock.now + result.wait, n))
            continue
        assert isinstance(result, Finish) and result.outcome.status == "sent", result
        assert result.outcome.admitted_at is not None
        sent.append((n, result.outcome.admitted_at))
    return sent, came


def check(sent: list[tuple[int, float]], first_run_at: float) -> None:
    """Booked order; spacing never below the policy's less the tolerance; none moved further
    than the policy requires (each a spacing after the one before, the first when its run
    came)."""
    assert [n for n, _ in sent] == list(range(1, BOOKED + 1)), sent
    assert sent[0][1] == pytest.approx(first_run_at, abs=0.002)
    for (_, a), (_, b) in itertools.pairwise(sent):
        assert b - a >= SPACING - TOLERANCE, sent
        assert b - a <= SPACING + 0.002, f"moved further than the policy requires: {sent}"


@pytest.mark.parametrize("arrival", [[4, 3, 2, 1], [3, 1, 4, 2], [2, 4, 1, 3], [1, 2, 3, 4]])
def test_late_mails_go_in_their_booked_order(
    backend_url: str, clock: ManualClock, arrival: list[int]
) -> None:
    """Whatever order the four runs arrive in (10 ms apart), the mail booked first goes first,
    when its run comes, and each next one a spacing after it."""
    guard = make_guard(backend_url, clock)
    sent, came = after_outage(guard, clock, arrival, [0.01] * BOOKED)
    check(sent, came[1])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    arrival=st.permutations(list(range(1, BOOKED + 1))),
    gaps=st.lists(st.sampled_from([0.0, 0.001, 0.3, 0.9, 5.0]), min_size=BOOKED, max_size=BOOKED),
)
def test_any_arrival_order_any_spread(arrival: list[int], gaps: list[float]) -> None:
    """Property, memory limiter: any arrival order, runs from 0 to 5 s apart (a slow restart):
    booked order, spacing kept, none further than required behind the one before."""
    clock = ManualClock(1_700_000_000.0)
    guard = make_guard("memory://", clock)
    sent, came = after_outage(guard, clock, list(arrival), gaps)
    assert sent[0][1] == pytest.approx(came[1], abs=0.002), "the first when its run came"
    assert [n for n, _ in sent] == list(range(1, BOOKED + 1)), (arrival, gaps, sent)
    for (_, a), (_, b) in itertools.pairwise(sent):
        assert SPACING - TOLERANCE <= b - a <= SPACING + 0.002, (arrival, gaps, sent)


def _late_trace(limiter: Limiter, clock: ManualClock, seed: int) -> list[tuple[object, ...]]:
    """A random trace of bookings, admissions asked again and late runs (every branch of the
    judgment in booked order: places ahead, bookings moved behind, the longest window's end
    where moves stop): every answer."""
    rng = random.Random(seed)
    answers: list[tuple[object, ...]] = []
    ids = [f"m{n}" for n in range(10)]
    for _ in range(250):
        clock.advance(rng.choice([0.0, 0.0004, 0.001, 0.1, 0.4, 1.0, 1.7, 3.0, 7.0, 12.0]))
        to = rng.choice(["ada@example.com", "bob@example.com"])
        mail_id = rng.choice(ids)
        if rng.random() < 0.05:
            answers.append(("release", limiter.release(to, mail_id)))
            continue
        late = rng.choice([0.0, 0.5, 1.0])
        d = limiter.acquire(
            to, mail_id=mail_id, max_wait=rng.choice([0.0, 5.0, 30.0]), late_after=late
        )
        answers.append((d.allowed, d.booked, d.at_ms, d.wait_ms, str(d.tier), d.remaining))
    return answers


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("policy", ["2/1s, 5/10s", "1/1s, 3/5s, 20/60s"])
def test_memory_and_redis_judge_in_booked_order_alike(
    redis_url: str, seed: int, policy: str
) -> None:
    """The pure algorithm and the Lua script give the same answers on one random trace."""
    memory_clock, redis_clock = ManualClock(1_000_000.0), ManualClock(1_000_000.0)
    parsed = Policy.parse(policy)
    memory = Limiter.from_url("memory://", parsed, clock=memory_clock)
    shared = Limiter.from_url(redis_url, parsed, secret="s", clock=redis_clock, namespace="alike")
    assert _late_trace(memory, memory_clock, seed) == _late_trace(shared, redis_clock, seed)
    shared.close()
