"""The suppression list's contract: what every suppression store promises (memory and a real
Redis), one suite.

Memory runs on a :class:`ManualClock`; on Redis an entry's key expires by Redis's clock and the
list compares ``until`` with the wall clock, so its tests use real entries of a few hundred
milliseconds and wait just past them. Each is built by
:func:`~mailer.records.suppression.suppressions_from_url`, as the workers build it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from mailer import InvalidAddress, ManualClock
from mailer.records.suppression import (
    MemorySuppressionStore,
    RedisSuppressionStore,
    Suppression,
    Suppressions,
    SuppressionStore,
    suppressions_from_url,
)
from mailer.storage import client_from_url

#: An entry short enough to wait out on a real Redis, in seconds.
SHORT = 0.3
#: Waiting this long lets a SHORT entry end on either backend.
PAST_SHORT = 0.4


@dataclass
class SuppressionBench:
    """A suppression list on one backend, a bare store beside it on the same backend, how to
    move time forward, and the raw client (Redis only)."""

    suppressions: Suppressions
    store: SuppressionStore
    let_pass: Callable[[float], None]
    client: Any


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def suppression_bench(
    request: pytest.FixtureRequest, clock: ManualClock
) -> Iterator[SuppressionBench]:
    """Each backend: the test's clock on memory, the wall clock on Redis."""
    if request.param == "memory":
        memory = suppressions_from_url("memory://", secret="s", clock=clock)
        yield SuppressionBench(memory, MemorySuppressionStore(), clock.advance, None)
        return
    url = str(request.getfixturevalue("redis_url"))
    client = client_from_url(url)
    suppressions = suppressions_from_url(url, secret="s", client=client)
    yield SuppressionBench(suppressions, RedisSuppressionStore(client, url), time.sleep, client)
    client.close()


@pytest.fixture
def store(suppression_bench: SuppressionBench) -> Suppressions:
    """The bench's suppression list, for tests that need no more."""
    return suppression_bench.suppressions


def test_suppress_look_up_and_lift_by_normalised_address(store: Suppressions) -> None:
    """An entry is found under any spelling of the address and lifted once."""
    entry = store.suppress("Ada+news@Example.com", seconds=3600, cause="550 5.1.1 user unknown")
    assert entry.until - entry.since == 3600
    assert store.suppressed("ada@example.com") == entry
    assert store.suppressed("bob@example.com") is None
    assert store.lift("ADA@example.com") is True
    assert store.lift("ada@example.com") is False
    assert store.suppressed("ada@example.com") is None


def test_a_suppression_ends_by_itself(suppression_bench: SuppressionBench) -> None:
    """Past ``until`` the address is no longer suppressed; nothing is left to lift on Redis."""
    store = suppression_bench.suppressions
    store.suppress("ada@example.com", seconds=SHORT, cause="bounce")
    assert store.suppressed("ada@example.com") is not None
    suppression_bench.let_pass(PAST_SHORT)
    assert store.suppressed("ada@example.com") is None


def test_suppressing_again_replaces_the_entry(store: Suppressions) -> None:
    """A second suppression of an address replaces the first: its cause and its end."""
    store.suppress("ada@example.com", seconds=3600, cause="complaint")
    second = store.suppress("ada@example.com", seconds=60, cause="550 5.1.1 user unknown")
    assert store.suppressed("ada@example.com") == second


def test_an_entry_keeps_the_first_300_characters_of_its_cause(store: Suppressions) -> None:
    """A long reply is cut to 300 characters, as set and as read back."""
    entry = store.suppress("ada@example.com", seconds=60, cause="x" * 500)
    assert entry.cause == "x" * 300
    assert store.suppressed("ada@example.com") == entry


def test_not_an_address_is_refused_by_every_method(store: Suppressions) -> None:
    """suppress, suppressed, lift and key_of raise InvalidAddress for a non-address."""
    calls: list[Callable[[], object]] = [
        lambda: store.suppress("not an address", seconds=60, cause="x"),
        lambda: store.suppressed("not an address"),
        lambda: store.lift("not an address"),
        lambda: store.key_of("not an address"),
    ]
    for call in calls:
        with pytest.raises(InvalidAddress):
            call()


def test_the_key_is_a_keyed_hash_of_the_normalised_address(store: Suppressions) -> None:
    """key_of is the same for every spelling, holds no address, and depends on the secret only
    (the same on every backend)."""
    key = store.key_of("Ada+x@Example.com")
    assert key == store.key_of("ada@example.com")
    assert key.startswith("mailguard:suppressed:{") and "ada" not in key
    assert key == suppressions_from_url("memory://", secret="s").key_of("ada@example.com")
    assert key != suppressions_from_url("memory://", secret="t").key_of("ada@example.com")


def test_the_stores_put_get_and_delete_by_key(suppression_bench: SuppressionBench) -> None:
    """Each store keeps an entry at its key until deleted (or, on Redis, past its TTL)."""
    store = suppression_bench.store
    entry = Suppression(since=time.time(), until=time.time() + 60, cause="bounce")
    assert store.get("ns:suppressed:{a}") is None
    store.put("ns:suppressed:{a}", entry, 60)
    assert store.get("ns:suppressed:{a}") == entry
    assert store.get("ns:suppressed:{b}") is None
    assert store.delete("ns:suppressed:{a}") is True
    assert store.delete("ns:suppressed:{a}") is False
    assert store.get("ns:suppressed:{a}") is None


def test_plain_read_answers_as_suppressed_does(suppression_bench: SuppressionBench) -> None:
    """On Redis the key plain_read names, read with the same client, answers what suppressed
    answers; memory has no such read (None)."""
    store = suppression_bench.suppressions
    store.suppress("ada@example.com", seconds=60, cause="bounce")
    read = store.plain_read("ada@example.com")
    if suppression_bench.client is None:
        assert read is None
        return
    assert read is not None and read[0] is suppression_bench.client
    assert read[1] == store.key_of("ada@example.com")
    assert store.from_raw(read[0].get(read[1])) == store.suppressed("ada@example.com")
    assert store.from_raw(None) is None
