"""The gcra bookings' worst order (``benchmarks/limiter.py``, :data:`ORDERS`): mails of the
full tier booked into the room of a half-rate backlog, each near the front, so that every
booking changes a group before the last and the groups' maps are kept only partly
(:class:`mailer.limits.gcra_maps.GroupMaps`). At every step the paged search answers as the
linear reference of :mod:`mailer.limits.gcra_log` (the earliest slot, room, expiry, before and
after each booking), with no
summary computed in between but what the search itself asks for."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from mailer.limits.gcra_log import GcraLog, earliest, expires_us, fold, give_back, insert, used
from mailer.limits.gcra_pages import Pages

NOW_US = 1_700_000_000_000_123
NOW = NOW_US // 1000
#: 14 a second: the tier's interval (µs); the backlog at half its rate.
LIMIT, INTERVAL = 14, -(-1_000_000 // 14)
HALF = -(-1_000_000 // 7)


def _linear(log: GcraLog) -> list[int]:
    return list(log.times)


def _check(log: GcraLog, now_us: int, t: int) -> int:
    """The paged answers against the linear ones from the same bookings; the slot found."""
    ref = _linear(log)
    now = now_us // 1000
    want = earliest(log.floor, ref, LIMIT, INTERVAL, t, now=now, now_us=now_us)
    got = earliest(log.floor, log.times, LIMIT, INTERVAL, t, now=now, now_us=now_us)
    assert got == want
    at = max(now_us, want * 1000)
    assert used(log.floor, log.times, INTERVAL, at) == used(log.floor, ref, INTERVAL, at)
    tat = log.floor
    for e in ref:
        tat = max(tat, e) + INTERVAL
    assert expires_us(log, INTERVAL) == tat
    return want


def _booked(log: GcraLog, now_us: int, x: int, tag: int) -> None:
    """Book ``x`` (ms) as a decision does, then check the room at it and the expiry against
    the linear reference: both come from the gap the search found it in (``Pages.booked``),
    and the answers kept for the searches (``Pages.answers``, per floor) are dropped by a
    booking into the pages."""
    at = x * 1000 if x > now_us // 1000 else now_us
    insert(log, at, tag, now_us, INTERVAL)
    ref = _linear(log)
    assert used(log.floor, log.times, INTERVAL, at) == used(log.floor, ref, INTERVAL, at)
    tat = log.floor
    for e in ref:
        tat = max(tat, e) + INTERVAL
    assert expires_us(log, INTERVAL) == tat
    assert at <= now_us or not log.times.answers  # a search's answer holds for the same floor


def test_front_bookings_into_a_half_rate_backlog_answer_as_the_linear_search() -> None:
    """600 bookings at half the rate in pages of 4 in groups of 3 (50 groups), then 120 mails
    each booked at the earliest slot from now: every one lands in the room near the front
    (a group before the last changes at each step) where the linear search puts it."""
    log = GcraLog(times=Pages(4, 3))
    for i in range(600):
        log.times.add(NOW_US + 1 + i * HALF, i + 1)
    assert len(log.times.groups) > 20
    slots = []
    for tag in range(1_000, 1_120):
        x = _check(log, NOW_US, NOW)
        assert _check(log, NOW_US, x) == x  # asked again from its answer: the same slot
        _booked(log, NOW_US, x, tag)
        slots.append(x)
    assert max(slots) * 1000 < NOW_US + 600 * HALF // 2  # each went into the front half
    fresh = copy.deepcopy(log.times)  # the same pages, every summary computed afresh
    fresh.forget()
    assert fresh.group_edges(INTERVAL) == log.times.group_edges(INTERVAL)
    c = (LIMIT - 1) * INTERVAL
    assert fresh.thresholds(INTERVAL, c) == log.times.thresholds(INTERVAL, c)


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from("ffffbmrx"), st.integers(0, 2_000), st.integers(0, 99)),
        max_size=80,
    ),
    sizes=st.tuples(st.integers(1, 4), st.integers(1, 3)),
)
def test_any_order_of_front_bookings_releases_and_folds(
    ops: list[tuple[str, int, int]], sizes: tuple[int, int]
) -> None:
    """A half-rate backlog in tiny pages and groups, then bookings at the earliest slot from
    now ("f"), from later on ("b"), in the middle anywhere ("m"), releases ("r") and folds as
    now moves on ("x"), searched after each with only the summaries a search asks for."""
    log = GcraLog(times=Pages(*sizes))
    for i in range(60):
        log.times.add(NOW_US + 1 + i * HALF, i + 1)
    now_us = NOW_US
    for n, (op, arg, pick) in enumerate(ops, 100):
        now = now_us // 1000
        if op in "fb":
            t = now if op == "f" else now + 1 + arg * 5
            x = _check(log, now_us, t)
            _booked(log, now_us, x, n)
        elif op == "m":
            insert(log, now_us + 1 + arg * 4_001, n, now_us, INTERVAL)
        elif op == "r" and log.times:
            entries = list(log.times.entries())
            e, tag = entries[pick % len(entries)]
            give_back(log, tag, -(-e // 1000), INTERVAL)
        elif op == "x":
            now_us += arg * 97
            fold(log, now_us, INTERVAL)
        _check(log, now_us, now_us // 1000)
