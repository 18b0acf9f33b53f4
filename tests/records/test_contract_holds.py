"""The holds' contract: what every hold store promises (memory and a real Redis), one suite.

Memory runs on a :class:`ManualClock`; on Redis a hold's key expires by Redis's clock and the
holds compare ``until`` with the wall clock, so its tests use real holds of a few hundred
milliseconds and wait just past them. Each is built by
:func:`~mailer.records.holds.holds_from_url`, as the workers build it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from mailer import ManualClock
from mailer.records.holds import (
    Hold,
    Holds,
    HoldStore,
    MemoryHoldStore,
    RedisHoldStore,
    holds_from_url,
    next_hold,
)
from mailer.storage import client_from_url

#: A hold short enough to wait out on a real Redis, in seconds.
SHORT = 0.3
#: Waiting this long lets a SHORT hold end on either backend.
PAST_SHORT = 0.4


@dataclass
class HoldsBench:
    """Holds on one backend, a bare store beside them on the same backend, how to move time
    forward, and the raw client (Redis only)."""

    holds: Holds
    store: HoldStore
    let_pass: Callable[[float], None]
    client: object | None


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def holds_bench(request: pytest.FixtureRequest, clock: ManualClock) -> Iterator[HoldsBench]:
    """Holds at most 10 s on each backend: the test's clock on memory, the wall clock on Redis."""
    if request.param == "memory":
        memory = holds_from_url("memory://", secret="s", clock=clock, max_hold=10)
        yield HoldsBench(memory, MemoryHoldStore(clock), clock.advance, None)
        return
    url = str(request.getfixturevalue("redis_url"))
    client = client_from_url(url)
    holds = holds_from_url(url, secret="s", client=client, max_hold=10)
    yield HoldsBench(holds, RedisHoldStore(client, url), time.sleep, client)
    client.close()


@pytest.fixture
def holds(holds_bench: HoldsBench) -> Holds:
    """The bench's holds, for tests that need no more."""
    return holds_bench.holds


def test_a_hold_doubles_while_in_force_up_to_the_max(holds: Holds) -> None:
    """2 s, then 4 s (level 1), then 8 s, then capped at 10 s; the recipient's apart."""
    first = holds.hold_sender(2, "454 4.7.0 Throttling failure")
    assert (first.until - first.since, first.level) == (2, 0)
    lengths = [round(h.until - h.since, 3) for h in (holds.hold_sender(2, "454") for _ in "abc")]
    assert lengths == [4, 8, 10]
    sender, recipient = holds.active("ada@example.com")
    assert sender is not None and sender.level == 3 and sender.cause == "454"
    assert recipient is None
    held = holds.hold_recipient("ada@example.com", 3, "450 4.2.1 slow down")
    assert holds.active("ada@example.com")[1] == held
    assert holds.active("bob@example.com")[1] is None


def test_a_stated_delay_longer_than_the_max_is_honoured(holds: Holds) -> None:
    """The reply's own delay (here 60 s) is not cut to the max; doubling never passes it."""
    holds.hold_sender(60, "421 try again in 1 minute")
    hold = holds.sender()
    assert hold is not None and hold.until - hold.since == 60


def test_a_hold_ends_by_itself_and_a_reply_soon_after_doubles_it(holds_bench: HoldsBench) -> None:
    """Past ``until`` no hold is in force; a throttling reply within one length after its end
    means the throttling continued: the next hold doubles (level 1)."""
    holds = holds_bench.holds
    holds.hold_sender(SHORT, "454")
    holds.hold_recipient("ada@example.com", SHORT, "450 4.2.1")
    assert holds.active("ada@example.com") != (None, None)
    holds_bench.let_pass(PAST_SHORT)
    assert holds.active("ada@example.com") == (None, None)
    assert holds.sender() is None
    again = holds.hold_sender(SHORT, "454")
    assert (again.level, round(again.length, 3)) == (1, 2 * SHORT)
    assert holds.hold_recipient("ada@example.com", SHORT, "450").level == 1


def test_a_hold_forgotten_one_length_after_its_end_starts_over(holds_bench: HoldsBench) -> None:
    """A throttling reply more than one length after the hold's end starts again from the
    first length (level 0): the throttling had stopped."""
    holds = holds_bench.holds
    holds.hold_sender(SHORT, "454")
    holds.hold_recipient("ada@example.com", SHORT, "450 4.2.1")
    holds_bench.let_pass(2 * SHORT + 0.1)
    fresh = holds.hold_sender(SHORT, "454")
    assert (fresh.level, round(fresh.length, 3)) == (0, SHORT)
    assert holds.hold_recipient("ada@example.com", SHORT, "450").level == 0


def test_a_reply_to_a_send_admitted_before_the_hold_does_not_double_it(holds: Holds) -> None:
    """Replies to mails already in flight when the hold began are the same throttling: the
    hold stays as it is (made longer only by a longer stated delay)."""
    first = holds.hold_sender(2, "454 4.7.0 Throttling failure")
    echo = holds.hold_sender(2, "454", asked=first.since - 0.5)
    assert echo == first
    longer = holds.hold_sender(5, "421 try again in 5 s", asked=first.since - 0.5, stated=True)
    assert (longer.level, round(longer.length, 3), longer.stated) == (0, 5, True)
    assert holds.sender() == longer


def test_a_hold_says_whether_its_length_was_stated(holds: Holds) -> None:
    """``stated``: the reply's own delay; a default or a doubling is not (a guess)."""
    assert holds.hold_sender(2, "454").stated is False
    doubled = holds.hold_sender(1, "421 try again in 1 s", stated=True)
    assert (doubled.length, doubled.stated) == (4, False)
    assert holds.hold_recipient("ada@example.com", 3, "450 4.2.1 wait 3 s", stated=True).stated


def test_each_recipient_doubles_apart(holds: Holds) -> None:
    """A recipient's hold (by limit key) doubles on its own; another recipient's and the
    sender's stay apart."""
    holds.hold_recipient("ada@example.com", 2, "450")
    again = holds.hold_recipient("ada@example.com", 2, "450")
    assert (again.level, round(again.until - again.since, 3)) == (1, 4)
    assert holds.hold_recipient("bob@example.com", 2, "450").level == 0
    assert holds.active("ada@example.com")[0] is None, "the sender is not held"


def test_a_hold_keeps_the_first_300_characters_of_its_cause(holds: Holds) -> None:
    """A long reply is cut to 300 characters, as set and as read back."""
    hold = holds.hold_sender(2, "x" * 500)
    assert hold.cause == "x" * 300
    assert holds.sender() == hold


def test_a_hold_must_last(holds: Holds) -> None:
    """A hold of 0 s or less is refused before anything is stored."""
    for seconds in (0, -1):
        with pytest.raises(ValueError, match="a hold lasts > 0 s"):
            holds.hold_sender(seconds, "454")
    assert holds.sender() is None


def test_the_stores_put_what_next_hold_says_and_get_in_order(holds_bench: HoldsBench) -> None:
    """Each store sets :func:`next_hold` of what it holds, atomically, and
    reads many keys at once, in their order, None for a missing one."""
    store = holds_bench.store
    now = float(round(time.time())) if holds_bench.client is not None else 100.0  # Redis: its clock
    first = store.put("ns:hold:a", now, 2.0, 10.0, "454")
    assert first == next_hold(None, now, 2.0, 10.0, "454")
    second = store.put("ns:hold:a", now + 1, 2.0, 10.0, "454")
    assert second == Hold(until=now + 5, level=1, cause="454", since=now + 1)
    echo = store.put("ns:hold:a", now + 1.5, 2.0, 10.0, "454", asked=now + 0.5)
    assert echo == second == next_hold(second, now + 1.5, 2.0, 10.0, "454", asked=now + 0.5)
    assert (first.written, second.written, echo.written) == (True, True, False)
    stated = store.put("ns:hold:b", now, 3.0, 10.0, "421 wait 3 s", stated=True)
    assert stated == next_hold(None, now, 3.0, 10.0, "421 wait 3 s", stated=True)
    assert stated.stated and stated.written
    read = store.get(["ns:hold:missing", "ns:hold:a"])
    assert read == [None, second] and read[1] is not None and not read[1].written


def test_evidence_counts_distinct_recipients_within_the_window(holds_bench: HoldsBench) -> None:
    """Two failures of one recipient count once; the third distinct recipient within the
    window reaches the count, which then starts over; failures older than the window are
    forgotten."""
    holds = holds_bench.holds
    assert holds.witness("ada@example.com", SHORT, 3) == 1
    assert holds.witness("ada@example.com", SHORT, 3) == 1
    assert holds.witness("bob@example.com", SHORT, 3) == 2
    assert holds.witness("cy@example.com", SHORT, 3) == 3
    assert holds.witness("dee@example.com", SHORT, 3) == 1, "the count started over"
    holds_bench.let_pass(PAST_SHORT)
    assert holds.witness("eve@example.com", SHORT, 3) == 1, "dee's failure is forgotten"
    with pytest.raises(ValueError, match="evidence needs"):
        holds.witness("ada@example.com", 0, 3)


def test_the_stores_witness_atomically_and_keep_no_address(holds_bench: HoldsBench) -> None:
    """The bare stores answer the same counts; on Redis the evidence is one sorted set of
    hashes that expires one window after its last failure."""
    store = holds_bench.store
    now = float(round(time.time())) if holds_bench.client is not None else 100.0
    counts = [store.witness("ns:hold:evidence", m, now + i * 0.01, 5.0, 3) for i, m in
              enumerate(["h1", "h2", "h1", "h3", "h4"])]  # fmt: skip
    assert counts == [1, 2, 2, 3, 1]
    assert store.witness("ns:hold:evidence", "h5", now + 10.0, 5.0, 3) == 1
    if holds_bench.client is None:
        return
    client: Any = holds_bench.client
    assert client.zrange("ns:hold:evidence", 0, -1) == [b"h5"]
    assert 0 < client.pttl("ns:hold:evidence") <= 5000
    holds_bench.holds.witness("ada@example.com", 5.0, 3)
    stored = b" ".join(client.zrange("mailguard:hold:evidence", 0, -1))
    assert stored.startswith(b"{") and b"ada" not in stored


def test_plain_read_answers_as_active_does(holds_bench: HoldsBench) -> None:
    """On one Redis the keys plain_read names, read together, answer what active answers;
    memory has no such read (None)."""
    holds = holds_bench.holds
    holds.hold_sender(5, "454")
    read = holds.plain_read("ada@example.com")
    if holds_bench.client is None:
        assert read is None
        return
    assert read is not None and read[0] is holds_bench.client
    assert holds.from_raws(read[0].mget(read[1])) == holds.active("ada@example.com")


def test_a_provider_hold_doubles_apart_from_the_senders(holds_bench: HoldsBench) -> None:
    """A provider's hold (``<namespace>:hold:provider:<name>``) doubles while its throttling
    continues, as the sender's does, and holds neither the sender nor another provider; only
    the ruled providers' names are taken."""
    holds = holds_bench.holds
    first = holds.hold_provider("google", 2, "421 4.7.28", stated=False)
    assert first.written and first.level == 0 and first.length == pytest.approx(2)
    again = holds.hold_provider("google", 2, "421 4.7.28")
    assert again.level == 1 and again.length == pytest.approx(4)
    assert holds.sender() is None
    assert set(holds.provider_holds()) == {"google"}
    assert holds.provider_holds()["google"].level == 1
    with pytest.raises(ValueError, match="no provider hold"):
        holds.hold_provider("example.net", 2, "421")


def test_the_read_with_provider_holds_answers_alone_as_together(holds_bench: HoldsBench) -> None:
    """With provider holds on, the keys plain_read names (the sender's, the recipient's, the
    relay's pace, each provider's hold and pace) read in one MGET answer what ``read`` answers
    on its own; memory has no such read."""
    holds = holds_bench.holds
    holds.providers = object()  # any finder turns them on; none is asked here
    holds.hold_provider("yahoo", 5, "421 4.7.0 [TSS04]")
    holds.provider_pace("yahoo").start(holds.now() + 5, cap=0.0)
    alone = holds.read("ada@example.com")
    assert set(alone.providers) == {"yahoo"} and alone.sender is None
    hold, pace = alone.providers["yahoo"]
    assert hold is not None and pace is not None and pace.since == pytest.approx(hold.until)
    read = holds.plain_read("ada@example.com")
    if holds_bench.client is None:
        assert read is None
        return
    assert read is not None and len(read[1]) == 3 + 2 * 3
    together = holds.read_raws(read[0].mget(read[1]))
    assert set(together.providers) == {"yahoo"}
    assert together.providers["yahoo"][0] == hold
    holds.providers = None
    off = holds.plain_read("ada@example.com")
    assert off is not None and len(off[1]) == 3, "provider holds off: the three keys of before"
