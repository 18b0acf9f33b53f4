"""The outbox's contract: what every outbox store promises (memory and a real Redis), one suite.
Each store is built by :func:`~mailer.records.outbox.outbox_from_url`. The Redis store reads
Redis's clock: its tests use a grace of 0 and a slack of 0 (entries written before now count),
the memory one a manual clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from mailer import ManualClock
from mailer.records.outbox import (
    CLEARED_TTL,
    LANES,
    MemoryOutbox,
    Outbox,
    Pending,
    RedisOutbox,
    lane_of,
    outbox_from_url,
)
from mailer.records.outbox.redis import EXPIRY_REFRESH
from tests.waiting import poll


@pytest.fixture
def outbox(backend_url: str, clock: ManualClock) -> Iterator[Outbox]:
    """An outbox on the test's backend (the Redis one on a flushed database)."""
    if backend_url == "memory://":
        memory = outbox_from_url(backend_url, clock=clock)
        assert isinstance(memory, MemoryOutbox)
        yield memory
        return
    client = redis.Redis.from_url(backend_url)
    client.flushdb()
    store = outbox_from_url(backend_url, client=client, queue="mail")
    assert isinstance(store, RedisOutbox) and store.client is client
    yield store
    client.close()


def _later(clock: ManualClock, seconds: float = 0.002) -> None:
    """Let time pass between two writes: the manual clock moves, Redis's needs a millisecond."""
    clock.advance(seconds)
    time.sleep(seconds)


def test_an_entry_received_is_gone_and_never_overdue(outbox: Outbox, clock: ManualClock) -> None:
    """Given a mail recorded, when a worker receives it, then the outbox is empty and nothing
    is overdue, however long after."""
    outbox.put("m1", "4", b"payload")
    assert outbox.size() == 1
    assert outbox.received("m1", "4") is True
    assert outbox.received("m1", "4") is False, "a second receipt finds nothing"
    _later(clock)
    assert outbox.size() == 0
    found = outbox.overdue(0.0, drained=True, slack=0.0)
    assert (found.popped, found.waiting) == ([], 0)


def test_a_queued_backlog_is_never_shown_popped(outbox: Outbox, clock: ManualClock) -> None:
    """Given 50 entries past the grace and nothing received in their lane, then none of them is
    shown popped (they wait in the queue): all 50 are counted as waiting."""
    for n in range(50):
        outbox.put(f"m{n}", "6", b"x")
    _later(clock, 0.01)
    found = outbox.overdue(0.0, slack=0.0)
    assert found.popped == []
    assert found.waiting == 50


def test_entries_behind_a_received_one_are_shown_popped(outbox: Outbox, clock: ManualClock) -> None:
    """Given a, b written in one lane and c in another, when b (written after a) is received,
    then a is shown popped (its lane moved past it) and c waits (its lane did not move)."""
    outbox.put("a", "6", b"A")
    outbox.put("c", "0", b"C")
    _later(clock)
    outbox.put("b", "6", b"B")
    _later(clock)
    assert outbox.received("b", "6")
    found = outbox.overdue(0.0, slack=0.0)
    assert [(p.mail_id, p.lane) for p in found.popped] == [("a", "6")]
    assert found.waiting == 1


def test_a_mark_within_the_slack_shows_nothing(outbox: Outbox, clock: ManualClock) -> None:
    """Given a and b written within the order slack (a slow producer could publish a after b),
    when b is received, then a is not shown popped."""
    outbox.put("a", "6", b"A")
    outbox.put("b", "6", b"B")
    assert outbox.received("b", "6")
    _later(clock)
    found = outbox.overdue(0.0, slack=60.0)
    assert (found.popped, found.waiting) == ([], 1)


def test_a_drained_queue_shows_every_old_entry(outbox: Outbox, clock: ManualClock) -> None:
    """Given entries in three lanes and nothing received, when the caller saw the queue empty,
    then all three are shown popped, at most ``limit``."""
    for mail_id, lane in (("x", "0"), ("y", "6"), ("z", "-")):
        outbox.put(mail_id, lane, mail_id.encode())
    _later(clock)
    found = outbox.overdue(0.0, drained=True, slack=0.0)
    assert sorted(p.mail_id for p in found.popped) == ["x", "y", "z"]
    assert found.waiting == 0
    assert len(outbox.overdue(0.0, drained=True, limit=2).popped) == 2


def test_the_grace_holds_back_young_entries(outbox: Outbox, clock: ManualClock) -> None:
    """Given an entry just written, then with a grace of an hour it is neither popped nor
    waiting, and cannot be taken."""
    outbox.put("young", "4", b"Y")
    found = outbox.overdue(3600.0, drained=True)
    assert (found.popped, found.waiting) == ([], 0)
    assert outbox.take([Pending("young", "4", 0.0)], 3600.0) == []


def test_take_returns_payloads_once_per_grace(outbox: Outbox, clock: ManualClock) -> None:
    """Given a popped entry, when taken, then its payload comes back and it is written again as
    of now: a second take within the grace finds nothing; the entry stays until received."""
    outbox.put("lost", "4", b"PAYLOAD")
    _later(clock)
    popped = outbox.overdue(0.0, drained=True, slack=0.0).popped
    taken = outbox.take(popped, 0.0)
    assert [(p.mail_id, p.lane, payload) for p, payload in taken] == [("lost", "4", b"PAYLOAD")]
    assert taken[0][0].at >= popped[0].at
    assert outbox.take(popped, 60.0) == [], "written again: young for another grace"
    assert outbox.size() == 1
    assert outbox.received("lost", "4")
    assert outbox.take(popped, 0.0) == []


def test_two_takers_never_take_one_entry(outbox: Outbox, clock: ManualClock) -> None:
    """Given 20 popped entries, when 8 threads take them at once, then each entry is taken by
    exactly one thread (every answer counted): a take writes the entry again as of its own now,
    so the others find it young. Redis's clock moves while the threads run: there a grace of
    a minute is checked on entries written a minute ago by hand."""
    for n in range(20):
        outbox.put(f"m{n}", "3", b"x")
    popped = [Pending(f"m{n}", "3", 0.0) for n in range(20)]
    if isinstance(outbox, RedisOutbox):  # back-date the entries by two minutes
        key = outbox.lane_key("3")
        for member, score in outbox.client.zrange(key, 0, -1, withscores=True):
            outbox.client.zadd(key, {member: score - 120_000})
    else:
        clock.advance(120)
    answers: list[str] = []
    lock = threading.Lock()

    def take() -> None:
        got = outbox.take(popped, 60.0)
        with lock:
            answers.extend(p.mail_id for p, _ in got)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == sorted(f"m{n}" for n in range(20))


def test_a_discarded_entry_moves_no_mark(outbox: Outbox, clock: ManualClock) -> None:
    """Given a then b written, when b is discarded (its publish failed), then a is not shown
    popped: no mark moved."""
    outbox.put("a", "5", b"A")
    _later(clock)
    outbox.put("b", "5", b"B")
    assert outbox.discard("b", "5") is True
    _later(clock)
    found = outbox.overdue(0.0, slack=0.0)
    assert (found.popped, found.waiting) == ([], 1)


def test_a_mark_never_moves_back(outbox: Outbox, clock: ManualClock) -> None:
    """Given a, b, c written in order, when c then b are received, then a is shown popped
    (the mark stays at c's time, not b's) and only a."""
    for mail_id in ("a", "b", "c"):
        outbox.put(mail_id, "2", mail_id.encode())
        _later(clock)
    assert outbox.received("c", "2") and outbox.received("b", "2")
    found = outbox.overdue(0.0, slack=0.0)
    assert [p.mail_id for p in found.popped] == ["a"]


def test_entries_expire_on_their_own(outbox: Outbox, clock: ManualClock, backend_url: str) -> None:
    """Given an entry, then it does not outlive the outbox's time to live: the memory store
    drops it once its clock passed it; every Redis key carries the expiry."""
    outbox.put("old", "1", b"O")
    if isinstance(outbox, RedisOutbox):
        ttls = [outbox.client.pttl(k) for k in (outbox.lane_key("1"), outbox.payloads_key)]
        assert all(0 < ttl <= 86_400_000 for ttl in ttls), ttls
        return
    clock.advance(86_400 + 1)
    assert outbox.overdue(0.0, drained=True).popped == []
    assert outbox.size() == 0


def test_expiries_are_refreshed_at_most_once_a_refresh_interval(redis_url: str) -> None:
    """Given a Redis outbox whose first put and receipt set the keys' expiry, when more puts and
    receipts follow within :data:`EXPIRY_REFRESH`, then none of them sends a ``PEXPIRE``; once
    this process's refresh is that old, the next put and receipt set every key's expiry."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    store = outbox_from_url(redis_url, client=client, queue="mail")
    assert isinstance(store, RedisOutbox)

    def pexpires() -> int:
        return int(client.info("commandstats").get("cmdstat_pexpire", {}).get("calls", 0))

    store.put("a", "4", b"A")
    store.received("a", "4")
    before = pexpires()
    for mail in ("b", "c", "d"):
        store.put(mail, "4", mail.encode())
    store.received("b", "4")
    store.received("c", "4")
    assert pexpires() == before
    store._refreshed = {k: v - EXPIRY_REFRESH for k, v in store._refreshed.items()}
    store.put("e", "4", b"E")
    store.received("d", "4")
    keys = (store.lane_key("4"), store.payloads_key, store.received_key)
    assert pexpires() == before + 3
    assert all(0 < client.pttl(key) <= 86_400_000 for key in keys)
    client.close()


def test_a_put_riding_ahead_of_its_publish_reads_no_receipt(redis_url: str) -> None:
    """Given a receipt that found no entry, when a put of that mail rides ahead of a publish
    (:meth:`RedisOutbox.put_command`: no receipt can come before it), then it is written: the
    riding put reads no receipt (the plain put would have written nothing)."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    store = outbox_from_url(redis_url, client=client, queue="mail")
    assert isinstance(store, RedisOutbox)
    store.received("ride", "4")
    client.execute_command(*store.put_command("ride", "4", b"R"))
    assert client.hget(store.payloads_key, "ride") == b"R"
    client.close()


def test_lanes_are_the_broker_priorities() -> None:
    """A priority 0-9 is its own lane; none, a bool or anything else is the ``-`` lane."""
    assert [lane_of(p) for p in (0, 9, None, True, 12, "3")] == ["0", "9", "-", "-", "-", "-"]
    assert len(LANES) == 11


def test_redis_keys_hold_no_address(redis_url: str) -> None:
    """Every key the Redis outbox writes shares one hash tag and names no address: the payload
    is opaque bytes under the mail id."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    store = outbox_from_url(redis_url, client=client, queue="mail", owner="abc")
    store.put("mail-1", "4", b'[2,0,["ada@example.com"],{},null]')
    keys = sorted(k.decode() for k in client.keys("*"))
    assert keys == ["mailguard:{outbox:mail@abc}:at:4", "mailguard:{outbox:mail@abc}:payloads"]
    assert not any("@example" in k for k in keys)
    client.close()


def test_puts_written_ahead_are_there_once_settled(outbox: Outbox, clock: ManualClock) -> None:
    """Given puts written without waiting (as ``send_mail.delay`` does before its publish), when
    the outbox is settled, then every entry is there as with :meth:`put`, and one received
    without waiting is gone; on Redis also after the server lost its scripts (``SCRIPT FLUSH``:
    loaded again for the write it refused)."""
    for n in range(300):  # more than the answers a Redis writer leaves unread
        outbox.put_later(f"ahead-{n}", "4", b"A")
    outbox.put_later("gone", "4", b"G")
    outbox.settle()
    outbox.received_later("gone", "4")
    if isinstance(outbox, RedisOutbox):
        outbox.settle()
        outbox.client.script_flush()
        outbox.put_later("ahead-300", "4", b"B")
    outbox.settle()
    _later(clock)
    found = outbox.overdue(0.0, drained=True, slack=0.0, limit=1000)
    expected = 301 if isinstance(outbox, RedisOutbox) else 300
    assert len({p.mail_id for p in found.popped}) == expected


def test_writes_nobody_waits_for_apply_on_a_server_without_the_scripts(redis_url: str) -> None:
    """Given a Redis that has no script loaded (a fresh or restarted server), when a new outbox
    writes a put and a clear without anyone reading their answers, then both are applied (seen
    from another connection), not held until their answers are read."""
    client = redis.Redis.from_url(redis_url)
    client.script_flush()
    store = outbox_from_url(redis_url, client=redis.Redis.from_url(redis_url), queue="mail")
    store.put_later("unread-1", "4", b"U")
    store.put_later("unread-2", "4", b"V")
    store.received_later("unread-2", "4")
    poll(lambda: client.zcard("mailguard:{outbox:mail}:at:4") == 1, 5, "the writes to apply")
    assert client.zrange("mailguard:{outbox:mail}:at:4", 0, -1) == [b"unread-1"]
    client.close()


def test_a_put_after_its_mails_receipt_writes_nothing(outbox: Outbox, clock: ManualClock) -> None:
    """Given a worker that received a mail before its put was applied (the write overtaken by
    the publish), when the put arrives, then no entry stays behind (nothing is overdue, even
    with the queue drained), and a later put of the same id is written again; another mail's
    put is untouched."""
    assert outbox.received("early", "4") is False
    outbox.put("early", "4", b"E")
    outbox.put("other", "4", b"O")
    _later(clock)
    found = outbox.overdue(0.0, drained=True, slack=0.0)
    assert [p.mail_id for p in found.popped] == ["other"]
    outbox.put("early", "4", b"E2")
    assert outbox.size() == 2, "the receipt is remembered for one put only"


def test_a_receipt_is_remembered_for_a_while_only(outbox: Outbox, clock: ManualClock) -> None:
    """Given a receipt that found no entry, when the put comes more than ``CLEARED_TTL`` later,
    then it is written (a late put is never that late; a receipt of some other producer's
    message leaves nothing for ever); a discard that finds nothing remembers nothing."""
    assert outbox.discard("gone", "3") is False
    outbox.put("gone", "3", b"G")
    assert outbox.size() == 1
    if isinstance(outbox, RedisOutbox):
        outbox.received("late", "3")
        ttl = outbox.client.pttl(outbox.cleared_key)
        assert 0 < ttl <= CLEARED_TTL * 1000, ttl
        return
    outbox.received("late", "3")
    clock.advance(CLEARED_TTL + 1)
    outbox.put("late", "3", b"L")
    assert outbox.size() == 2
