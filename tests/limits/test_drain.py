"""A backlog drains at full speed: a late booked mail is judged inside the decision, on the
limiter's clock, against the recipient's entries actually *sent* (overdue bookings, whose runs
have not come yet, no longer push it back), and a booking reached next to a late mail sent since
waits its spacing. On an injected clock (memory), the same answers on Redis, and through the
guard (what a worker runs: tests/reliability/test_drain_worker.py)."""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter

import pytest

from mailer import Kind, Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import GuardConfig, Later, MailRequest
from mailer.limits.sliding_log import BOOKED, TAG_BITS
from mailer.mail.transports import MemoryTransport
from mailer.records.ledger import MemoryLedger

POLICY = Policy.parse("1/1s, 100/1h")  # a long window: no booking is pruned
TOLERANCE = 1.0
WAIT = 60.0


def book(limiter: Limiter, mail_id: str, to: str = "ada@example.com") -> float:
    decision = limiter.acquire(to, mail_id=mail_id, max_wait=WAIT, late_after=TOLERANCE)
    assert decision.allowed or decision.booked
    return decision.at


def run(limiter: Limiter, mail_id: str, to: str = "ada@example.com") -> tuple[str, float]:
    """A booked mail's run: ``sent`` now, ``booked`` again at a time, or ``refused``."""
    d = limiter.acquire(to, mail_id=mail_id, max_wait=WAIT, late_after=TOLERANCE)
    return ("sent" if d.allowed else "booked" if d.booked else "refused"), d.at


def test_overdue_bookings_no_longer_push_a_late_mail_back(clock: ManualClock) -> None:
    """Ten mails booked 1 s apart, none run until 20 s later (a backlog): each run goes at once
    (the one before it was sent, the others are overdue bookings), the next one a spacing after
    the last one sent: none is booked behind its recipient's other mails."""
    limiter = Limiter.from_url("memory://", POLICY, clock=clock)
    assert limiter.judges_lateness
    slots = [book(limiter, f"m{n}") for n in range(10)]
    assert slots == [clock() + n for n in range(10)]
    clock.advance(20.0)
    answers = []
    for n in range(10):
        answers.append(run(limiter, f"m{n}"))
        clock.advance(1.0)
    assert [a for a, _ in answers] == ["sent"] * 10


def test_a_late_mail_goes_at_once_and_the_next_waits_its_spacing(clock: ManualClock) -> None:
    """Two overdue mails run 1 ms apart: the first goes, the second is booked one spacing after
    the first's real send (once), and at that slot it goes."""
    limiter = Limiter.from_url("memory://", POLICY, clock=clock)
    book(limiter, "x")  # sent at once
    book(limiter, "a")
    book(limiter, "b")
    clock.advance(10.0)
    assert run(limiter, "a") == ("sent", clock())
    sent_at = clock()
    clock.advance(0.001)
    state, slot = run(limiter, "b")
    assert state == "booked" and slot == pytest.approx(sent_at + 1.0, abs=0.002)
    clock.set(slot + 0.5)  # on time for its new slot (within the tolerance)
    assert run(limiter, "b")[0] == "sent"


def test_a_booking_reached_next_to_a_late_mail_sent_since_waits(clock: ManualClock) -> None:
    """x sent at 0, y booked at 1, z at 2; y runs 1.5 s late (at 2.5) and goes; z, on time at
    2.6, would leave 0.1 s after y: it is booked 1 s after y instead. Never closer than the
    spacing, whatever order the runs come in."""
    limiter = Limiter.from_url("memory://", POLICY, clock=clock)
    start = clock()
    book(limiter, "x")
    book(limiter, "y")
    book(limiter, "z")
    clock.set(start + 2.5)
    assert run(limiter, "y")[0] == "sent"
    clock.set(start + 2.6)
    state, slot = run(limiter, "z")
    assert state == "booked" and slot == pytest.approx(start + 3.5, abs=0.002)


def test_an_admitted_mail_asking_again_keeps_its_slot_and_release_still_works(
    clock: ManualClock,
) -> None:
    """The same mail id asking again after its admission: the same slot, nothing more; a mail
    id whose tag has bit 47 set is stored without the flag once sent; release finds both."""
    limiter = Limiter.from_url("memory://", POLICY, clock=clock)
    book(limiter, "a")
    clock.advance(0.2)
    first = limiter.acquire("ada@example.com", mail_id="a", max_wait=WAIT, late_after=TOLERANCE)
    assert first.allowed
    assert limiter.release("ada@example.com", "a")
    assert BOOKED & TAG_BITS == 0 and BOOKED == 1 << 47


def _trace(limiter: Limiter, clock: ManualClock, seed: int) -> list[tuple[object, ...]]:
    """A random trace of bookings, late and on-time runs and releases: every answer."""
    rng = random.Random(seed)
    answers: list[tuple[object, ...]] = []
    ids = [f"m{n}" for n in range(12)]
    for _ in range(300):
        clock.advance(rng.choice([0.0, 0.0005, 0.1, 0.4, 1.0, 1.7, 3.0]))
        to = rng.choice(["ada@example.com", "bob@example.com"])
        mail_id = rng.choice(ids)
        if rng.random() < 0.1:
            answers.append(("release", limiter.release(to, mail_id)))
            continue
        d = limiter.acquire(to, mail_id=mail_id, max_wait=rng.choice([0.0, 5.0]), late_after=0.5)
        answers.append((d.allowed, d.booked, d.at, d.wait, d.remaining))
    return answers


@pytest.mark.redis
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_memory_and_redis_judge_late_runs_alike(redis_url: str, seed: int) -> None:
    """The pure algorithm and the Lua script give the same answers on one random trace."""
    policy = Policy.parse("1/1s, 3/5s, 20/60s")  # no log idle long enough to be evicted
    memory_clock, redis_clock = ManualClock(1_000_000.0), ManualClock(1_000_000.0)
    memory = Limiter.from_url("memory://", policy, clock=memory_clock)
    shared = Limiter.from_url(
        redis_url, policy, secret="s", clock=redis_clock, namespace=f"drain{seed}"
    )
    assert shared.judges_lateness
    assert _trace(memory, memory_clock, seed) == _trace(shared, redis_clock, seed)
    shared.close()


def test_through_the_guard_a_backlog_drains_without_moving_back(clock: ManualClock) -> None:
    """Eight mails to one recipient: the first sent, seven booked 1 s apart, then run 30 s late
    in the order of their slots (as a worker's queue holds them), each run 10 ms after the one
    before: all are sent, never closer than the spacing less the tolerance (0.1 s), none booked
    again more than once."""
    limiter = Limiter.from_url("memory://", POLICY, clock=clock)
    transport = MemoryTransport()
    guard = memory_guard(
        limiter, MemoryLedger(clock), transport, kinds=Kinds.defaults(), clock=clock,
        config=GuardConfig(late_tolerance=0.1),
    )  # fmt: skip
    mails = {
        f"m{n}": MailRequest(to="ada@example.com", mail_id=f"m{n}", subject="s", body="b")
        for n in range(8)
    }
    steps = {mail_id: guard.process(m) for mail_id, m in mails.items()}
    assert len(transport.sent) == 1
    clock.advance(30.0)
    queue = [
        (step.outcome.due or 0.0, n, mail_id) for n, (mail_id, step) in enumerate(steps.items())
    ]
    queue = [entry for entry in queue if isinstance(steps[entry[2]], Later)]
    heapq.heapify(queue)
    sent_at: list[float] = []
    rebooked: Counter[str] = Counter()
    while queue:
        due, n, mail_id = heapq.heappop(queue)
        clock.set(max(clock() + 0.01, due))
        booked = steps[mail_id]
        assert isinstance(booked, Later)
        step = guard.process(mails[mail_id], booked.progress)
        steps[mail_id] = step
        if isinstance(step, Later):
            rebooked[mail_id] += 1
            heapq.heappush(queue, (step.outcome.due or 0.0, n, mail_id))
            continue
        assert step.outcome.status == "sent"
        sent_at.append(clock())
    assert len(sent_at) == 7 and max(rebooked.values(), default=0) <= 1, (rebooked, sent_at)
    assert all(b - a >= 1.0 - 0.1 - 1e-6 for a, b in itertools.pairwise(sent_at)), sent_at


def test_through_the_guard_an_on_time_mail_behind_a_late_one_is_judged_again(
    clock: ManualClock,
) -> None:
    """x sent at 0, y booked at 1, z (a kind that may wait 2.5 s) at 2. y runs 0.9 s late (at
    1.9) and goes; z, on time at 2, must wait its spacing after y (2.9), past its deadline: it
    is dropped ``late`` (its slot lost to a late mail), counted as judged again, never sent."""
    limiter = Limiter.from_url("memory://", POLICY, clock=clock)
    transport = MemoryTransport()
    kinds = Kinds.defaults().with_kind(Kind("quick", subject="s", body="b", max_wait=2.5))
    guard = memory_guard(
        limiter, MemoryLedger(clock), transport, kinds=kinds, clock=clock,
        config=GuardConfig(late_tolerance=0.5),
    )  # fmt: skip
    start = clock()
    x, y, z = (
        MailRequest(to="ada@example.com", mail_id=name, kind=kind, subject="s", body="b")
        for name, kind in (("x", "default"), ("y", "default"), ("z", "quick"))
    )
    assert guard.process(x).outcome.status == "sent"
    booked_y, booked_z = guard.process(y), guard.process(z)
    assert isinstance(booked_y, Later) and isinstance(booked_z, Later)
    assert booked_z.outcome.due == pytest.approx(start + 2.0, abs=0.002)
    clock.set(start + 1.9)
    assert guard.process(y, booked_y.progress).outcome.status == "sent"
    clock.set(start + 2.0)
    dropped = guard.process(z, booked_z.progress).outcome
    assert (dropped.status, dropped.reason) == ("dropped", "late"), dropped
    assert len(transport.sent) == 2, "x and y sent, z never"
