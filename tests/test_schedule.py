"""The schedule's atomic steps, the same tests on the memory and the Redis schedule."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis

from mailer import ManualClock
from mailer.outcomes import Outcome
from mailer.records.schedule import MemorySchedule, RedisSchedule, Schedule
from mailer.records.schedule.park import parked_until
from mailer.steps import Later, Progress


@pytest.fixture
def schedule(backend_url: str, clock: ManualClock) -> Iterator[Schedule]:
    """A schedule on the test's backend. The Redis one reads Redis's clock: its tests park
    entries relative to the wall clock (``clock`` is set to it)."""
    if backend_url == "memory://":
        yield MemorySchedule(clock)
        return
    client = redis.Redis.from_url(backend_url)
    yield RedisSchedule(client, backend_url)
    client.close()


@pytest.fixture
def now(clock: ManualClock) -> float:
    """Now, for both schedules: the manual clock moved to the wall clock (Redis reads TIME)."""
    import time  # noqa: PLC0415 - only to align the manual clock with Redis's

    clock.now = time.time()
    return clock.now


def test_only_due_entries_are_taken_earliest_first(schedule: Schedule, now: float) -> None:
    """Given three entries, two due, when taken, then the due ones come earliest first with
    their payloads, and the future one stays parked."""
    schedule.park("b", now - 1, b"B")
    schedule.park("a", now - 5, b"A")
    schedule.park("later", now + 3600, b"L")
    assert schedule.next_due() == pytest.approx(now - 5, abs=0.01)
    taken = schedule.take_due(limit=10, lease=30, ahead=0.5)
    assert [(t.mail_id, t.payload) for t in taken] == [("a", b"A"), ("b", b"B")]
    assert schedule.take_due(limit=10, lease=30, ahead=0.5) == []
    stats = schedule.stats()
    assert (stats.parked, stats.promoting, stats.dead) == (1, 2, 0)
    assert stats.earliest_due == pytest.approx(now + 30, abs=0.5), "the leases end first"
    assert schedule.next_due() == stats.earliest_due


def test_take_respects_the_limit_and_done_forgets(schedule: Schedule, now: float) -> None:
    """At most ``limit`` entries per take; ``done`` forgets exactly the promoted ones."""
    for n in range(5):
        schedule.park(f"m{n}", now - 10 + n, b"x")
    first = schedule.take_due(limit=3, lease=30, ahead=0)
    assert [t.mail_id for t in first] == ["m0", "m1", "m2"]
    assert schedule.done([t.mail_id for t in first]) == 3
    assert schedule.done(["m0"]) == 0
    assert [t.mail_id for t in schedule.take_due(limit=3, lease=30, ahead=0)] == ["m3", "m4"]


def test_an_expired_lease_is_taken_again(
    schedule: Schedule, now: float, clock: ManualClock
) -> None:
    """A promoter that took an entry and died (no ``done``): once its lease ends, the entry is
    taken again, with its payload."""
    schedule.park("m", now - 1, b"P")
    assert [t.mail_id for t in schedule.take_due(lease=0.2, ahead=0)] == ["m"]
    assert schedule.take_due(lease=0.2, ahead=0) == []
    if isinstance(schedule, MemorySchedule):
        clock.advance(0.3)
    else:
        import time  # noqa: PLC0415 - the Redis lease runs on Redis's clock

        time.sleep(0.3)
    assert [(t.mail_id, t.payload) for t in schedule.take_due(lease=30, ahead=0)] == [("m", b"P")]


def test_a_mail_parked_again_while_promoting_is_not_forgotten(
    schedule: Schedule, now: float
) -> None:
    """A promoted mail that runs and parks again before its promoter calls ``done``: the new
    entry stays parked."""
    schedule.park("m", now - 1, b"old")
    schedule.take_due()
    schedule.park("m", now + 60, b"new")
    assert schedule.done(["m"]) == 0
    assert [(m, p) for m, _, p in schedule.scan()] == [("m", b"new")]


def test_cancel_removes_a_parked_or_promoting_entry(schedule: Schedule, now: float) -> None:
    """Cancel answers the payload of a waiting mail (parked or promoting), then None."""
    schedule.park("p", now + 60, b"P")
    schedule.park("q", now - 1, b"Q")
    schedule.take_due()
    assert schedule.payload("p") == b"P" and schedule.payload("q") == b"Q"
    assert schedule.cancel("p") == b"P"
    assert schedule.cancel("q") == b"Q"
    assert schedule.cancel("p") is None and schedule.payload("p") is None
    stats = schedule.stats()
    assert (stats.parked, stats.promoting) == (0, 0)


def test_a_buried_entry_is_a_dead_letter_and_never_taken_again(
    schedule: Schedule, now: float
) -> None:
    """``bury`` moves a promoting entry to the dead letters, with its payload as it was."""
    schedule.park("bad", now - 1, b"\xff not json")
    schedule.park("good", now - 1, b"{}")
    for taken in schedule.take_due():
        if taken.mail_id == "bad":
            schedule.bury("bad")
    assert schedule.dead_letters() == [("bad", b"\xff not json")]
    assert schedule.stats().dead == 1


def test_concurrent_takers_never_share_an_entry(schedule: Schedule, now: float) -> None:
    """Eight threads take from 400 due entries at once: each entry is taken exactly once."""
    for n in range(400):
        schedule.park(f"m{n}", now - 1, b"x")
    got: list[str] = []
    lock = threading.Lock()

    def take() -> None:
        while batch := schedule.take_due(limit=7, lease=30):
            with lock:
                got.extend(t.mail_id for t in batch)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(got) == sorted(f"m{n}" for n in range(400))


def _later(reason: str, countdown: float, due: float | None) -> Later:
    return Later(
        countdown,
        Outcome(status="deferred", mail_id="m", kind="default", reason=reason, due=due),
        Progress(),
    )


def test_parked_until_parks_long_bookings_at_their_slot() -> None:
    """A booking further than ``park_after`` is parked until its slot (not the hop's
    countdown); a short one keeps its countdown; ``None`` turns parking off."""
    assert parked_until(_later("booked", 600, 3600.0), 0.0, 30.0) == 3600.0
    assert parked_until(_later("booked", 20, 20.0), 0.0, 30.0) is None
    assert parked_until(_later("booked", 600, 3600.0), 0.0, None) is None
    assert parked_until(_later("smtp_transient", 120, None), 100.0, 30.0) == 220.0


def test_the_schedule_gauges_count_parked_mails_and_the_oldest_overdue_age(
    clock: ManualClock,
) -> None:
    """``mailguard_parked_mails`` counts parked mails; ``mailguard_parked_overdue_seconds`` is
    how long ago the earliest was due (0 while none is overdue)."""
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    from mailer.metrics import ScheduleCollector  # noqa: PLC0415

    schedule = MemorySchedule(clock)
    registry = CollectorRegistry()
    registry.register(ScheduleCollector(schedule.stats, clock))
    schedule.park("a", clock.now + 60, b"x")
    schedule.park("b", clock.now + 120, b"x")
    assert registry.get_sample_value("mailguard_parked_mails") == 2
    assert registry.get_sample_value("mailguard_parked_overdue_seconds") == 0
    clock.advance(75)
    assert registry.get_sample_value("mailguard_parked_overdue_seconds") == 15
