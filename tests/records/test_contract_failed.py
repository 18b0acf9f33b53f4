"""The kept failed mails' contract (memory and a real Redis), one suite: a payload is kept once,
taken once (also by many callers at once), given back, listed by when it failed, and gone after
its retention (memory: an injected clock; Redis: the key's TTL, read with ``PTTL``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from mailer import ManualClock
from mailer.records.failed import FailedStore, RedisFailedStore, failed_from_url
from mailer.storage import client_from_url

DAY = 86_400.0


@dataclass
class Bench:
    store: FailedStore
    clock: ManualClock
    client: Any = None


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def failed_bench(request: pytest.FixtureRequest) -> Iterator[Bench]:
    clock = ManualClock(1_700_000_000.0)
    if request.param == "memory":
        yield Bench(failed_from_url("memory://", clock=clock), clock)
        return
    url = str(request.getfixturevalue("redis_url"))
    client = client_from_url(url)
    yield Bench(failed_from_url(url, client=client), clock, client)
    client.close()


def test_a_payload_is_kept_once_and_taken_once(failed_bench: Bench) -> None:
    """A second keep (a redelivered copy of the failed run) changes nothing; one take gets the
    payload, the next gets None; the marker names the new id and stops any later keep."""
    store, now = failed_bench.store, failed_bench.clock()
    assert store.keep("m1", b"one", failed_at=now, retention=DAY)
    assert not store.keep("m1", b"two", failed_at=now + 5, retention=DAY)
    assert store.failed_at("m1") == now
    assert store.take("m1", "m1.retry1", DAY) == b"one"
    assert store.take("m1", "m1.retry1", DAY) is None
    assert store.retried_as("m1") == "m1.retry1"
    assert store.failed_at("m1") is None
    assert not store.keep("m1", b"three", failed_at=now, retention=DAY)
    assert store.take("m1", "m1.retry1", DAY) is None
    assert store.retried_as("unknown") is None and store.take("unknown", "x", DAY) is None


def test_many_takers_at_once_get_one_payload(failed_bench: Bench) -> None:
    """Twenty threads take one kept payload at the same moment: exactly one gets it."""
    failed_bench.store.keep("m2", b"payload", failed_at=failed_bench.clock(), retention=DAY)
    barrier = threading.Barrier(20)
    got: list[bytes | None] = []

    def take() -> None:
        barrier.wait()
        got.append(failed_bench.store.take("m2", "m2.retry1", DAY))

    threads = [threading.Thread(target=take) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(got, key=lambda g: g is None) == [b"payload"] + [None] * 19


def test_given_back_it_can_be_taken_again(failed_bench: Bench) -> None:
    """A take whose enqueue failed gives the payload back: kept again, no marker."""
    store, now = failed_bench.store, failed_bench.clock()
    store.keep("m3", b"p", failed_at=now, retention=DAY)
    payload = store.take("m3", "m3.retry1", DAY)
    assert payload == b"p"
    store.give_back("m3", payload, failed_at=now, retention=DAY)
    assert store.retried_as("m3") is None and store.failed_at("m3") == now
    assert store.failed_since(now) == ["m3"]
    assert store.take("m3", "m3.retry1", DAY) == b"p"


def test_failed_since_lists_the_kept_ones_in_the_window(failed_bench: Bench) -> None:
    """Oldest first; an entry taken is no longer listed; one failed before ``since`` is not."""
    store, now = failed_bench.store, failed_bench.clock()
    store.keep("old", b"o", failed_at=now - 7200, retention=DAY)
    store.keep("b", b"b", failed_at=now - 60, retention=DAY)
    store.keep("a", b"a", failed_at=now - 120, retention=DAY)
    store.keep("c", b"c", failed_at=now - 30, retention=DAY)
    assert store.failed_since(now - 3600) == ["a", "b", "c"]
    store.take("b", "b.retry1", DAY)
    assert store.failed_since(now - 3600) == ["a", "c"]
    assert store.failed_since(now - 3600, limit=1) == ["a"]


def test_memory_payload_and_marker_end_with_the_retention() -> None:
    """On the memory store's clock: kept until the retention is over, then gone (not listed,
    nothing to take); the marker of a taken one ends likewise."""
    clock = ManualClock(1_000.0)
    store = failed_from_url("memory://", clock=clock)
    store.keep("m", b"p", failed_at=clock(), retention=3600)
    store.keep("t", b"p", failed_at=clock(), retention=3600)
    store.take("t", "t.retry1", 3600)
    clock.advance(3599)
    assert store.failed_at("m") == 1_000.0 and store.retried_as("t") == "t.retry1"
    clock.advance(1)
    assert store.failed_at("m") is None and store.failed_since(0) == []
    assert store.take("m", "m.retry1", 3600) is None and store.retried_as("t") is None


@pytest.mark.redis
def test_redis_keys_hold_mail_ids_and_expire_with_the_retention(redis_url: str) -> None:
    """The payload and the marker carry the retention as their TTL (``PTTL``); every key is
    named by mail id under the ``{failed}`` hash tag; an expired payload drops out of
    ``failed_since``."""
    client = client_from_url(redis_url)
    store = failed_from_url(redis_url, client=client)
    assert isinstance(store, RedisFailedStore)
    store.keep("m", b"p", failed_at=1_000.0, retention=2 * DAY)
    ttl = client.pttl(store.kept_key("m"))
    assert 2 * DAY * 1000 - 5000 < ttl <= 2 * DAY * 1000
    assert store.take("m", "m.retry1", 2 * DAY) == b"p"
    assert 2 * DAY * 1000 - 5000 < client.pttl(store.retried_key("m")) <= 2 * DAY * 1000
    assert client.exists(store.kept_key("m")) == 0
    store.keep("n", b"p", failed_at=1_000.0, retention=DAY)
    client.delete(store.kept_key("n"))  # what its TTL does at the end of the retention
    assert store.failed_since(0) == [] and client.zcard(store.index_key) == 0
    # The index emptied is gone (Redis drops an empty sorted set): only the marker is left.
    assert [k.decode() for k in client.keys("*")] == ["mailguard:{failed}:retried:m"]
    client.close()
