"""The fleet benchmark's program still runs (:mod:`benchmarks.fleet`), at toy size: one fleet
of one worker, a few parked mails, a short window, bursts of 30 mails and 100 due together, on
its own redis-server.

Nothing here is timed: a toy window's rates mean little. What must hold: each row carries a
finite rate for mailguard and for the plain floor, the floor's workers cost something (their
``BRPOP``), and the busiest commands are named."""

from __future__ import annotations

import math

import pytest

from benchmarks import fleet

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(300)]


def test_one_fleet_of_one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet, "SETTLE", 1.0)
    rows = fleet.run((1,), parked=20, window=2.0, sizes=(30, 100))
    fleet.print_rows(rows)  # shown when a check fails
    ((guarded, floor),) = rows
    assert guarded.workers == floor.workers == 1
    assert math.isfinite(guarded.rate) and math.isfinite(floor.rate)
    assert floor.rate > 0 and guarded.rate > 0
    assert "brpop" in dict(floor.top), floor.top
    assert all(rate > 0 for _, rate in guarded.top), guarded.top
    assert isinstance(fleet.met(guarded, floor), bool)
    assert guarded.burst_rate > 0 and floor.burst_rate > 0, "every mail of both bursts done"
    assert guarded.burst_commands > floor.burst_commands > 0
    assert math.isfinite(guarded.late_p99), "the mails due together were promoted"
