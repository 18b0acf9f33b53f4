"""The schedule's contract: what every schedule store promises (memory and a real Redis), one
suite. Each store is built by :func:`~mailer.records.schedule.schedule_from_url`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from mailer import ManualClock
from mailer.records.schedule import (
    SHARDS,
    MemorySchedule,
    RedisSchedule,
    Schedule,
    ScheduleStats,
    schedule_from_url,
)


@pytest.fixture(params=[1, SHARDS], ids=["one-shard", "sharded"])
def shards(request: pytest.FixtureRequest) -> int:
    """The Redis schedule's shards: one (a single Redis server's layout) or a Cluster's (the
    memory schedule runs once for each, the same)."""
    return int(request.param)


@pytest.fixture
def schedule(backend_url: str, clock: ManualClock, shards: int) -> Iterator[Schedule]:
    """A schedule on the test's backend. The Redis one reads Redis's clock: its tests park
    entries relative to the wall clock (``clock`` is set to it)."""
    if backend_url == "memory://":
        memory = schedule_from_url(backend_url, clock=clock)
        assert isinstance(memory, MemorySchedule)
        yield memory
        return
    client = redis.Redis.from_url(backend_url)
    schedule = schedule_from_url(backend_url, client=client, shards=shards)
    assert isinstance(schedule, RedisSchedule) and schedule.client is client
    yield schedule
    client.close()


@pytest.fixture
def now(clock: ManualClock) -> float:
    """Now, for both schedules: the manual clock moved to the wall clock (Redis reads TIME)."""
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
    """At most ``limit`` entries per take, earliest first (across a Redis schedule's shards:
    each shard's earliest, shards served in turn); ``done`` forgets exactly the promoted ones."""
    for n in range(5):
        schedule.park(f"m{n}", now - 10 + n, b"x")
    first = [t.mail_id for t in schedule.take_due(limit=3, lease=30, ahead=0)]
    assert len(first) == 3 and first == sorted(first)
    assert schedule.done(first) == 3
    assert schedule.done([first[0]]) == 0
    second = [t.mail_id for t in schedule.take_due(limit=3, lease=30, ahead=0)]
    assert second == sorted(second) and sorted(first + second) == [f"m{n}" for n in range(5)]


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
        time.sleep(0.3)  # the Redis lease runs on Redis's clock
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


def test_an_empty_schedule_answers_nothing(schedule: Schedule) -> None:
    """Nothing parked: no due time, zero counts, nothing to take, cancel, read or list."""
    assert schedule.next_due() is None
    assert schedule.stats() == ScheduleStats(0, 0, 0, None)
    assert schedule.take_due() == []
    assert schedule.done([]) == 0 and schedule.done(["ghost"]) == 0
    assert schedule.cancel("ghost") is None and schedule.payload("ghost") is None
    assert list(schedule.scan()) == [] and schedule.dead_letters() == []


def test_scan_lists_parked_entries_by_due_and_promoting_ones_without(
    schedule: Schedule, now: float
) -> None:
    """scan() shows every waiting entry once: a parked one with its due time, a promoting one
    with None; reading a payload moves nothing."""
    schedule.park("due", now - 1, b"D")
    schedule.park("later", now + 600, b"L")
    assert [t.mail_id for t in schedule.take_due(lease=30, ahead=0)] == ["due"]
    assert schedule.payload("later") == b"L"
    rows = {mail_id: (due, payload) for mail_id, due, payload in schedule.scan()}
    assert rows.keys() == {"due", "later"}
    assert rows["due"] == (None, b"D")
    assert rows["later"][0] == pytest.approx(now + 600, abs=0.01) and rows["later"][1] == b"L"
    stats = schedule.stats()
    assert (stats.parked, stats.promoting) == (1, 1)


def test_parking_again_replaces_the_due_time_and_payload(schedule: Schedule, now: float) -> None:
    """A mail id is parked once: a second park moves it and keeps the newer payload."""
    schedule.park("m", now + 600, b"first")
    schedule.park("m", now - 1, b"second")
    assert schedule.stats().parked == 1
    assert [(t.mail_id, t.payload) for t in schedule.take_due(ahead=0)] == [("m", b"second")]


def test_dead_letters_are_listed_up_to_the_limit(schedule: Schedule, now: float) -> None:
    """dead_letters(limit) lists at most ``limit`` buried entries, each with its payload."""
    for n in range(3):
        schedule.park(f"bad{n}", now - 1, f"P{n}".encode())
    for taken in schedule.take_due():
        schedule.bury(taken.mail_id)
    assert len(schedule.dead_letters(limit=2)) == 2
    assert sorted(schedule.dead_letters()) == [("bad0", b"P0"), ("bad1", b"P1"), ("bad2", b"P2")]
    assert schedule.take_due() == [] and schedule.stats().dead == 3


def test_a_watch_is_taken_once_its_time_passed_never_ahead(
    schedule: Schedule, now: float, clock: ManualClock
) -> None:
    """A watch scored 0.3 s ahead is not taken even with ``ahead`` 1 s (its run may still
    come); once its time passed it is taken, marked as the watchdog's, and then promoting."""
    schedule.watch("w", now + 0.3, b"W")
    schedule.park("p", now + 0.3, b"P")
    stats = schedule.stats()
    assert (stats.parked, stats.watched, stats.promoting) == (1, 1, 0)
    assert [(t.mail_id, t.watched) for t in schedule.take_due(ahead=1)] == [("p", False)]
    _let_pass(schedule, clock, 0.4)
    assert [(t.mail_id, t.payload, t.watched) for t in schedule.take_due(ahead=1)] == [
        ("w", b"W", True)
    ]
    stats = schedule.stats()
    assert (stats.parked, stats.watched, stats.promoting) == (0, 0, 2)


def test_a_run_that_starts_pushes_its_watch_a_lease_ahead(schedule: Schedule, now: float) -> None:
    """``running`` moves a watch's time to now + lease (a long send is not published again);
    it changes nothing for a parked entry or an unknown mail."""
    schedule.watch("w", now - 1, b"W")
    schedule.park("p", now - 1, b"P")
    assert schedule.running("w", 60) is True
    assert schedule.running("p", 60) is False
    assert schedule.running("nobody", 60) is False
    assert [t.mail_id for t in schedule.take_due(ahead=0)] == ["p"]
    assert dict((m, due) for m, due, _ in schedule.scan())["w"] == pytest.approx(now + 60, abs=1)


def test_one_entry_per_mail_id_across_park_and_watch(schedule: Schedule, now: float) -> None:
    """Watching a parked or promoting mail replaces that entry, parking a watched one too;
    ``forget`` removes whatever is there, and a promoter's ``done`` leaves a newer watch."""
    schedule.park("m", now - 1, b"P")
    schedule.watch("m", now + 60, b"W")
    assert schedule.stats().parked == 0 and schedule.stats().watched == 1
    assert schedule.payload("m") == b"W"
    schedule.park("m", now - 1, b"P2")
    assert schedule.stats().watched == 0 and schedule.stats().parked == 1
    assert [t.mail_id for t in schedule.take_due(ahead=0)] == ["m"]
    schedule.watch("m", now + 60, b"W2")  # the promoted mail ran and waits again
    assert schedule.done(["m"]) == 0, "the new watch is not forgotten"
    assert schedule.payload("m") == b"W2"
    assert schedule.forget("m") is True
    assert schedule.forget("m") is False
    assert schedule.stats() == ScheduleStats(0, 0, 0, None)
    schedule.watch("c", now + 60, b"C")
    assert schedule.cancel("c") == b"C" and schedule.stats().watched == 0


def test_entries_not_published_are_released_back_where_they_were(
    schedule: Schedule, now: float, clock: ManualClock
) -> None:
    """The broker refused a take: ``release`` puts each entry back (parked, or watched), due
    again after the delay instead of the lease; an entry parked anew meanwhile is left."""
    schedule.watch("w", now - 1, b"W")
    schedule.park("p", now - 1, b"P")
    schedule.park("q", now - 1, b"Q")
    taken = schedule.take_due(lease=30, ahead=0)
    assert {t.mail_id for t in taken} == {"w", "p", "q"}
    schedule.park("q", now + 3600, b"Q2")
    assert schedule.release(taken, 0.2) == 2
    stats = schedule.stats()
    assert (stats.parked, stats.watched, stats.promoting) == (2, 1, 0)
    _let_pass(schedule, clock, 0.3)
    again = {(t.mail_id, t.watched) for t in schedule.take_due(ahead=0)}
    assert again == {("w", True), ("p", False)}


def _let_pass(schedule: Schedule, clock: ManualClock, seconds: float) -> None:
    """Let ``seconds`` pass for ``schedule``: the manual clock, or Redis's own (a short sleep)."""
    if isinstance(schedule, MemorySchedule):
        clock.advance(seconds)
    else:
        time.sleep(seconds)
