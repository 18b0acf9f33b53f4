"""The sender's pace after a hold (a slow start): the pure AIMD controller on an injected clock,
the pace store's contract on memory and a real Redis (same calls, same answers), the guard's use of
it (held mails resume one after the other; a throttling reply while paced halves the rate
instead of holding again), its gauge and ``mailguard status --sender``."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest
import redis
from prometheus_client import CollectorRegistry

from mailer import BackendUnavailable, Kinds, Limiter, ManualClock, Policy
from mailer.factory import build_holds, memory_guard
from mailer.guard import GuardConfig, Later, MailRequest
from mailer.mail.transports import MemoryTransport
from mailer.metrics import PaceCollector
from mailer.records.holds import Holds, MemoryHoldStore, holds_from_url
from mailer.records.holds.pace import (
    FLOOR,
    FORGET_AFTER,
    MARGIN,
    MemoryPaceStore,
    Pace,
    PaceStore,
    learned_pace,
    sender_cap,
    slow_pace,
    start_pace,
    take_slot,
)
from mailer.records.holds.pace_redis import RedisPaceStore
from mailer.records.ledger import MemoryLedger
from mailer.settings import Settings
from mailer.storage import client_from_url
from tests.workers.cli.test_cli import invoke

SHAPED = (421, "4.7.0 Too many messages, slow down")
KEY = "mailguard:pace:{sender}"


# The pure controller ---------------------------------------------------------------------------


def test_slots_follow_the_rate_which_grows_additively_and_halves() -> None:
    """1/s from the hold's end, +0.5/s each second: slots 1 s apart at first, closer later; a
    throttling reply halves the rate at that moment, once per change (a reply to a send
    admitted before it changes nothing), never below the floor."""
    pace = start_pace(100.0, rate=1.0, step=0.5, cap=0.0)
    slots = []
    for _ in range(4):
        slot, pace = take_slot(pace, 90.0)
        slots.append(slot)
    assert slots[:2] == [100.0, 101.0]
    assert slots[2] - slots[1] == pytest.approx(1 / 1.5) and slots[3] > slots[2]
    assert pace.rate_at(104.0) == pytest.approx(3.0)
    slowed = slow_pace(pace, 104.0, asked=103.9)
    assert (slowed.rate, slowed.since, slowed.level) == (1.5, 104.0, 1)
    assert slowed.next == pytest.approx(104.0 + 1 / 1.5)
    assert slow_pace(slowed, 104.1, asked=103.95) is slowed, "answered already"
    low = Pace(rate=FLOOR, since=0.0, next=0.0, step=0.0)
    assert slow_pace(low, 1.0, asked=1.0).rate == FLOOR


def test_a_sender_tier_bounds_the_pace_and_ends_it_once_reached() -> None:
    """The cap is the slowest sender tier (mails/s); at the cap the pace is over (the tier paces
    alone); without a cap it is forgotten 600 s after its last change."""
    assert sender_cap(Policy.parse("recipient: 1/1s; sender: 14/1s, 100/10s")) == 10.0
    assert sender_cap(Policy.parse("1/60s")) == 0.0
    capped = start_pace(0.0, rate=1.0, step=1.0, cap=3.0)
    assert capped.rate_at(10.0) == 3.0 and not capped.over(1.0) and capped.over(2.0)
    free = start_pace(0.0, rate=1.0, step=1.0, cap=0.0)
    assert not free.over(600.0) and free.over(600.1)
    with pytest.raises(ValueError, match="rate > 0"):
        start_pace(0.0, rate=0.0, step=1.0, cap=0.0)


def test_a_refusal_after_accepted_mails_learns_the_count_per_window() -> None:
    """Six slots, the sixth refused: the five before it in the last 10 s are the relay's count
    per window; the pace then sends five per 11 s (the window plus 10 %), the first a window
    after the first counted, and no longer grows. A refusal with nothing counted keeps the
    learned rate, one slot on."""
    pace = start_pace(0.0, rate=1.0, step=0.5, cap=0.0)
    slots = []
    for _ in range(6):
        slot, pace = take_slot(pace, 0.0)
        slots.append(slot)
    learned = slow_pace(pace, slots[-1] + 0.05, asked=0.0, window=10.0)
    assert (learned.quota, learned.window, learned.step, learned.level) == (5, 10.0, 0.0, 1)
    assert learned.rate == pytest.approx(5 / 11.0) and learned.next == pytest.approx(11.0)
    after = []
    for _ in range(6):
        slot, learned = take_slot(learned, 0.0)
        after.append(slot)
    assert after[5] - after[0] == pytest.approx(11.0), "five per window and a tenth, spread"
    edge = slow_pace(learned, after[0] + 0.01, asked=after[0], window=10.0)
    assert edge.quota == 5 and edge.rate == learned.rate
    assert edge.next == pytest.approx(after[0] + 0.01 + 11.0 / 5)
    assert learned_pace(start_pace(0.0, rate=1.0, step=0.5, cap=0.2), 5, 10.0).rate == 0.2


def test_only_seconds_with_mail_sent_grow_the_rate() -> None:
    """A pace nobody asked for a slot for 99 s has grown by one second's step, not 100."""
    pace = start_pace(0.0, rate=1.0, step=0.5, cap=0.0)
    _, pace = take_slot(pace, 0.0)
    slot, pace = take_slot(pace, 100.0)
    assert slot == 100.0 and pace.idle == pytest.approx(99.0)
    assert pace.rate_at(100.0) == pytest.approx(1.5)


# The pace store's contract: memory and Redis ---------------------------------------------------


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def pace_store(request: pytest.FixtureRequest) -> Iterator[PaceStore]:
    if request.param == "memory":
        yield MemoryPaceStore()
        return
    url = str(request.getfixturevalue("redis_url"))
    client = client_from_url(url)
    client.delete(KEY, f"{KEY}:slots", f"{KEY}:learned")
    yield RedisPaceStore(client, url)
    client.close()


def test_the_store_gives_slots_holds_them_per_mail_and_forgets_them_when_slowed(
    pace_store: PaceStore,
) -> None:
    """Each mail gets the next slot and holds it (asking again answers the same slot; asking
    at it gives it up); a slow-down halves the rate and forgets the slots held; no pace: None."""
    assert pace_store.take(KEY, "m0", 10.0) is None
    pace_store.start(KEY, start_pace(100.0, rate=1.0, step=0.5, cap=0.0))
    first, second = pace_store.take(KEY, "m1", 99.0), pace_store.take(KEY, "m2", 99.0)
    assert first is not None and second is not None
    assert (first[0], second[0]) == (100.0, 101.0)
    again = pace_store.take(KEY, "m2", 99.5)
    assert again is not None and again[0] == 101.0, "the slot m2 holds"
    used = pace_store.take(KEY, "m1", 100.0)
    assert used is not None and used[0] == 100.0
    slowed = pace_store.slow(KEY, 101.0, asked=100.0)
    assert slowed is not None and slowed.level == 1 and slowed.written
    assert slowed.rate == pytest.approx((1.0 + 0.5) / 2)
    echo = pace_store.slow(KEY, 101.1, asked=100.5)
    assert echo == slowed and echo is not None, "a reply answered already"
    assert not echo.written, "only the call that halved it says so"
    retaken = pace_store.take(KEY, "m2", 101.0)
    assert retaken is not None and retaken[0] == pytest.approx(101.0 + 1 / 0.75, abs=1e-4)
    current = pace_store.get(KEY)
    assert current is not None and current.next > retaken[0]


def test_the_store_ends_a_pace_that_reached_its_cap(pace_store: PaceStore) -> None:
    """At the sender tier's rate the pace is over: deleted, and no slot is given."""
    pace_store.start(KEY, start_pace(0.0, rate=1.0, step=1.0, cap=2.0))
    assert pace_store.take(KEY, "m1", 0.5) is not None
    assert pace_store.take(KEY, "m2", 1.5) is None
    assert pace_store.get(KEY) is None


def test_the_store_keeps_a_learned_count_past_its_pace(pace_store: PaceStore) -> None:
    """A count learned at a refusal outlives the pace (forgotten 600 s after the refusal): a
    pace started later begins from it, five per 11 s, not from the slow start's 1/s."""
    pace_store.start(KEY, start_pace(0.0, rate=1.0, step=0.5, cap=0.0))
    given = [pace_store.take(KEY, f"m{n}", 0.0) for n in range(6)]
    last = given[-1]
    assert last is not None
    learned = pace_store.slow(KEY, last[0] + 0.05, asked=0.0, window=10.0)
    assert learned is not None and learned.written and learned.quota == 5
    assert learned.next == pytest.approx(11.0, abs=1e-3)
    assert pace_store.take(KEY, "late", learned.since + 601.0) is None, "the pace is forgotten"
    again = pace_store.start(KEY, start_pace(900.0, rate=1.0, step=0.5, cap=0.0))
    assert (again.quota, again.step) == (5, 0.0) and again.rate == pytest.approx(5 / 11.0)
    first = pace_store.take(KEY, "n1", 900.0)
    second = pace_store.take(KEY, "n2", 900.0)
    assert first is not None and second is not None
    assert second[0] - first[0] == pytest.approx(11.0 / 5, abs=1e-3)


def test_the_store_learns_nothing_without_a_window(pace_store: PaceStore) -> None:
    """``window`` 0: the rate halves, as the slow start alone does."""
    pace_store.start(KEY, start_pace(0.0, rate=1.0, step=0.0, cap=0.0))
    for n in range(3):
        pace_store.take(KEY, f"m{n}", 0.0)
    slowed = pace_store.slow(KEY, 2.0, asked=0.0)
    assert slowed is not None and slowed.quota == 0 and slowed.rate == 0.5


@pytest.mark.redis
def test_the_redis_pace_keeps_no_address_and_expires(redis_url: str) -> None:
    """Two keys in one Cluster slot ({sender}), expiring after the pace is forgotten."""
    holds = Holds.from_url(redis_url, secret="s")
    holds.pace.start(holds.now(), cap=0.0)
    holds.pace.take("12345")
    holds.pace.take("67890")
    client = redis.Redis.from_url(redis_url)
    keys = sorted(k.decode() for k in client.keys("mailguard:pace:*"))  # type: ignore[union-attr]
    assert keys == [KEY, f"{KEY}:slots"]
    assert 0 < client.pttl(KEY) <= 602_000
    client.delete(*keys)
    client.close()


# The guard --------------------------------------------------------------------------------------


def guard_on(clock: ManualClock, policy: str = "100/1s", **config: float | None) -> tuple:  # type: ignore[type-arg]
    limiter = Limiter.from_url("memory://", Policy.parse(policy), clock=clock)
    transport = MemoryTransport()
    guard = memory_guard(
        limiter,
        MemoryLedger(clock),
        transport,
        kinds=Kinds.defaults(),
        clock=clock,
        config=GuardConfig(**config),  # type: ignore[arg-type]
    )
    return guard, transport


def mail(n: int) -> MailRequest:
    return MailRequest(to=f"user{n}@example.com", mail_id=f"m{n}", subject="s", body="b")


def test_held_mails_resume_one_after_the_other_not_as_a_herd(clock: ManualClock) -> None:
    """A 421 holds the sender 5 s; the held mail and 9 more are booked at pace slots from the
    hold's end, 1 s apart at first and closer as the rate grows, none at the same time."""
    guard, transport = guard_on(clock, throttle_hold=5.0)
    transport.fail_next(1, code=SHAPED[0], reply=SHAPED[1])
    steps = [guard.process(mail(n)) for n in range(10)]
    assert all(isinstance(s, Later) for s in steps)
    dues = [s.outcome.due for s in steps]
    hold_end = clock() + 5.0
    assert dues[0] == pytest.approx(hold_end) and dues[1] == pytest.approx(hold_end + 1.0)
    gaps = [b - a for a, b in itertools.pairwise(dues)]
    assert all(0 < g <= 1.0 + 1e-9 for g in gaps) and gaps[-1] < gaps[0]
    assert {s.outcome.hold for s in steps} == {"sender"}
    for n, step in enumerate(steps):  # each at its slot: sent, no new slot taken
        clock.set(step.outcome.due)
        assert guard.process(mail(n), step.progress).outcome.status == "sent"
    assert len(transport.sent) == 10


def test_a_throttling_reply_while_paced_halves_the_rate_and_holds_nobody(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """After the hold, a 421 to a mail sent at its pace slot slows the pace (level 1) and books
    that mail at the next slot: no second hold is written, the next mails go further apart."""
    guard, transport = guard_on(clock, throttle_hold=2.0)
    transport.fail_next(1, code=SHAPED[0], reply=SHAPED[1])
    held = guard.process(mail(0))
    assert isinstance(held, Later)
    assert held.outcome.due is not None
    clock.set(held.outcome.due + 4.0)  # the rate grew to 3/s meanwhile
    transport.fail_next(1, code=SHAPED[0], reply=SHAPED[1])
    with caplog.at_level("INFO", logger="mailguard"):
        again = guard.process(mail(0), held.progress)
    assert isinstance(again, Later) and again.outcome.hold == "pace"
    assert again.outcome.tier == "sender pace" and again.outcome.smtp_code == 421
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("pace slowed: sender at 1.5 mails/s") for line in lines), lines
    assert sum(line.startswith("hold started") for line in lines) == 1, "the first hold only"
    assert guard.holds is not None and guard.holds.sender() is None
    pace = guard.holds.pace.current()
    assert pace is not None and pace.level == 1


def test_a_throttling_reply_after_accepted_mails_learns_the_count_per_window(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """After the hold, six mails go at their slots and the seventh gets a 421: six per window
    (``MAILGUARD_PACE_WINDOW``, 60 s) is learned, the refused mail waits for the next window
    (66 s after the first of the six) and the pace no longer grows."""
    guard, transport = guard_on(clock, throttle_hold=5.0)
    transport.fail_next(1, code=SHAPED[0], reply=SHAPED[1])
    steps = [guard.process(mail(n)) for n in range(7)]
    assert all(isinstance(s, Later) for s in steps)
    for n, step in enumerate(steps[:6]):
        clock.set(step.outcome.due)
        assert guard.process(mail(n), step.progress).outcome.status == "sent"
    clock.set(steps[6].outcome.due)
    transport.fail_next(1, code=SHAPED[0], reply=SHAPED[1])
    with caplog.at_level("INFO", logger="mailguard"):
        refused = guard.process(mail(6), steps[6].progress)
    assert isinstance(refused, Later) and refused.outcome.hold == "pace"
    assert refused.outcome.due == pytest.approx(steps[0].outcome.due + 66.0, abs=1e-6)
    lines = [r.getMessage() for r in caplog.records]
    assert any("6 per 60 s learned" in line for line in lines), lines
    assert guard.holds is not None
    pace = guard.holds.pace.current()
    assert pace is not None and (pace.quota, pace.step) == (6, 0.0)


def test_without_a_slow_start_held_mails_are_booked_at_the_hold_end(clock: ManualClock) -> None:
    """``MAILGUARD_PACE_START=off``: the hold ends in one go, as before."""
    limiter = Limiter.from_url("memory://", Policy.parse("100/1s"), clock=clock)
    holds = Holds(MemoryHoldStore(clock), clock=clock)
    holds.pace.rate = None  # what MAILGUARD_PACE_START=off builds
    transport = MemoryTransport()
    guard = memory_guard(
        limiter, MemoryLedger(clock), transport, kinds=Kinds.defaults(), clock=clock,
        config=GuardConfig(throttle_hold=5.0), holds=holds,
    )  # fmt: skip
    transport.fail_next(1, code=SHAPED[0], reply=SHAPED[1])
    dues = {guard.process(mail(n)).outcome.due for n in range(5)}
    assert dues == {clock() + 5.0}
    assert Settings.from_env({"MAILGUARD_PACE_START": "off"}).pace_start is None


# Seen --------------------------------------------------------------------------------------------


def test_the_pace_gauge_reads_the_learned_rate(clock: ManualClock) -> None:
    """mailguard_sender_pace_rate: the rate now (0 without a pace); a pace that cannot be read
    leaves the sample out."""
    holds = Holds.from_url("memory://", clock=clock)
    registry = CollectorRegistry()
    registry.register(PaceCollector(holds.pace.rate_now))
    assert registry.get_sample_value("mailguard_sender_pace_rate") == 0.0
    holds.pace.start(clock(), cap=0.0)
    clock.advance(2)
    assert registry.get_sample_value("mailguard_sender_pace_rate") == 2.0

    def down() -> float:
        raise BackendUnavailable("redis://127.0.0.1:1/0")

    broken = CollectorRegistry()
    broken.register(PaceCollector(down))
    assert broken.get_sample_value("mailguard_sender_pace_rate") is None


@pytest.mark.redis
def test_status_sender_shows_the_learned_rate(redis_url: str) -> None:
    """status --sender: the pace's rate now (text and JSON), nothing more without one."""
    env = {"MAILGUARD_LIMITER_URL": redis_url, "MAILGUARD_SECRET": "s1"}
    holds = build_holds(Settings.from_env(env))  # the relay's pace, as the command reads it
    key = holds.pace.key
    client = redis.Redis.from_url(redis_url)
    client.delete(key, f"{key}:slots")
    calm = invoke(["status", "--sender"], env)
    assert calm.exit_code == 0 and "paced" not in calm.stdout
    began = holds.now()
    pace = holds.pace.start(began - 2.0, cap=0.0)  # two seconds into the slow start
    assert pace is not None
    shown = invoke(["status", "--sender"], env)
    assert shown.exit_code == 0, shown.output
    assert "sender paced after a hold: 2" in shown.stdout and "mails/s now" in shown.stdout
    as_json = json.loads(invoke(["status", "--sender", "--json"], env).stdout)
    # The rate grows while the commands run (a slow machine takes tenths of a second): it is
    # the rate two seconds in at the least, and at most the rate when the answer came.
    low, high = pace.rate_at(began), pace.rate_at(holds.now())
    assert low - 0.01 <= as_json["pace"]["rate_now"] <= high + 0.01, (low, high)
    assert low == pytest.approx(2.0)
    client.delete(key, f"{key}:slots")
    client.close()


# Per relay and provider ------------------------------------------------------------------------


@pytest.fixture
def relay_holds(backend_url: str, clock: ManualClock) -> Holds:
    """Holds whose paces are one relay's, on the test's backend and injected clock (the pace
    script takes its times from the caller on Redis too)."""
    return holds_from_url(backend_url, secret="s", clock=clock, relay="smtp:relay.test:587:app")


def test_each_relay_and_provider_has_its_own_pace(relay_holds: Holds, backend_url: str) -> None:
    """The relay's pace lives under its keyed hash (no host or user in clear), each provider's
    beside it with ``:<name>`` (one Cluster slot); starting Google's leaves the relay's and
    Yahoo's alone, and a second relay's pace is another key."""
    key = relay_holds.pace.key
    assert key.startswith("mailguard:pace:{") and "relay.test" not in key and "app" not in key
    google = relay_holds.provider_pace("google")
    assert google.key == f"{key}:google"
    google.start(relay_holds.now(), cap=0.0)
    assert google.current() is not None
    assert relay_holds.pace.current() is None
    assert relay_holds.provider_pace("yahoo").current() is None
    other = holds_from_url(backend_url, secret="s", relay="smtp:other.test:25:")
    assert other.pace.key != key
    with pytest.raises(ValueError, match="no provider hold"):
        relay_holds.provider_pace("example.net")


def test_a_provider_pace_idle_does_not_grow_and_is_forgotten_to_what_was_measured(
    relay_holds: Holds, clock: ManualClock
) -> None:
    """Google's pace grows only in the seconds mail is sent: after five quiet minutes its next
    gap is the one before them (not a rate that grew while nobody sent). A refusal learns the
    count per window; ten minutes without throttling (:data:`FORGET_AFTER`) forget the pace,
    and the pace after Google's next hold starts from that count per window, not growing."""
    pace = relay_holds.provider_pace("google")
    pace.start(clock(), cap=0.0)
    slots = []
    for n in range(6):
        taken = pace.take(f"m{n}")
        assert taken is not None
        slots.append(taken[0])
        clock.set(taken[0])
    before = slots[-1] - slots[-2]
    clock.advance(300.0)  # nobody sends
    after = [pace.take("q1"), pace.take("q2")]
    assert after[0] is not None and after[1] is not None
    gap = after[1][0] - after[0][0]
    # grown by a step or two of sending, not by 300 s x 0.5/s (a gap of 0.007 s)
    assert before / 2 < gap <= before, (before, gap)
    clock.set(after[1][0] + 0.01)
    learned = pace.slow(asked=slots[0])  # MAILGUARD_PACE_WINDOW: 60 s
    assert learned is not None and learned.quota >= 1 and learned.step == 0.0
    clock.advance(FORGET_AFTER + 1.0)
    assert pace.current() is None and pace.take("late") is None, "forgotten"
    again = pace.start(clock() + 600.0, cap=0.0)
    assert again is not None and (again.quota, again.step) == (learned.quota, 0.0)
    assert again.rate == pytest.approx(learned.quota / (60.0 * MARGIN))
