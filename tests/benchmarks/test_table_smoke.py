"""The one table's programs still run: each row of ``python -m benchmarks.table`` built at toy
sizes (a few rounds, tens of mails, hundreds of bookings) on real servers: a worker, a
redis-server, a three-node Cluster. A benchmark that a change broke (a script's arguments, a
renamed function) fails here, not in the next ``make bench``.

Nothing here is timed: the figures of a toy run mean nothing; each row must carry a number
where the table prints one, and the counts the programs check themselves (every mail sent,
every parked mail promoted) must hold."""

from __future__ import annotations

import math
import re

import pytest

from benchmarks import (
    decision,
    guard,
    limiter,
    per_mail,
    provider_scope,
    schedule,
    schedule_scale,
    table,
    waiting_scale,
)

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(300)]

#: The first number of a cell ("1,234", "+7.0", "0.917", "+1.4 %").
_NUMBER = re.compile(r"[-+]?[\d,]*\.?\d+")


def number(cell: str) -> float:
    """The first number in a table cell."""
    found = _NUMBER.search(cell)
    assert found is not None, f"no number in {cell!r}"
    return float(found.group().replace(",", ""))


def well_formed(rows: list[table.Row], count: int) -> None:
    """``count`` rows of five cells, each value a finite number and each target met or not."""
    assert len(rows) == count, rows
    for measure, value, floor, target, met in rows:
        assert measure and floor and target, (measure, floor, target)
        assert math.isfinite(number(value)), (measure, value)
        assert met in ("yes", "no", ""), (measure, met)
    table.print_table(rows)  # shown when a later check fails


def test_the_decision_rows(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """No-op, seed, lower bound and mailguard, hot and distinct: four rows each."""
    monkeypatch.setattr(decision, "ROUNDS", 2)
    monkeypatch.setattr(decision, "CALLS", 50)
    well_formed(table.decision_rows(decision.measure(redis_url)), 8)


def test_the_provider_scope_rows(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision with a provider scope against without (its own DNS server for the warm-up;
    the program checks that the decisions asked it nothing): two rows; without the scope
    every decision admits."""
    monkeypatch.setattr(provider_scope, "ROUNDS", 2)
    monkeypatch.setattr(provider_scope, "CALLS", 50)
    figures = provider_scope.measure(redis_url)
    assert figures.admitted[provider_scope.CONTENDERS[0]] == [1.0, 1.0]
    well_formed(table.provider_rows(figures), 2)


def test_the_guard_and_waiting_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Throughput against the unguarded task (each guarded result checked by the program),
    commands per sent mail against a plain task in both layouts (every result stored), and the
    bytes of parked mails (every mail waiting, each one's record and schedule entries copied at
    scale)."""
    well_formed(table.guard_rows(guard.collect(1, 20, quiet=True)), 1)
    monkeypatch.setattr(per_mail, "IDLE_WINDOW", 0.5)
    monkeypatch.setattr(per_mail, "WARMUP", 2)
    commands = table.commands_rows(per_mail.run(10))
    well_formed(commands, 2)
    assert all(number(value) > number(floor) > 0 for _, value, floor, _, _ in commands)
    monkeypatch.setattr(schedule, "IDLE", 0.5)
    monkeypatch.setattr(waiting_scale, "LOW", 256)
    monkeypatch.setattr(waiting_scale, "STEPS", 2)
    waiting = schedule.run_design("parked", "5s", 20, 60.0, waiting_only=True)
    sample = waiting.sample
    assert sample is not None and len(sample.keys) == 20, "every parked mail sampled"
    assert all(len(keys) == 1 for keys in sample.keys), "each mail's result record"
    assert all(len(members) == 2 for members in sample.members), "its due and payload entries"
    well_formed(table.waiting_rows(waiting), 2)


def test_the_gcra_and_scale_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """gcra's booking orders at 10 and 200 bookings (Redis and memory), the schedule with 2 000
    parked (every one of a slice promoted) and on a three-node Cluster."""
    monkeypatch.setattr(limiter, "BACKLOGS", (10, 200))
    monkeypatch.setattr(limiter, "ORDER_MAILS", 20)
    monkeypatch.setattr(limiter, "ORDER_BATCH", 10)
    well_formed(table.gcra_rows(), 4)
    monkeypatch.setattr(table, "SCALE_MAILS", 2_000)
    monkeypatch.setattr(table, "SCALE_SLICE", 200)
    monkeypatch.setattr(table, "CLUSTER_MAILS", 1_000)
    monkeypatch.setattr(schedule_scale, "SPREAD", 1.0)
    monkeypatch.setattr(schedule_scale, "LEAD", 2.0)
    monkeypatch.setattr(schedule_scale.run_node, "__defaults__", (1.0,))  # the idle window, s
    rows = table.scale_rows()
    well_formed(rows, 2)
    assert rows[0][4] == "yes", "every mail of the slice promoted, none over a second late"


def test_the_smtp_reuse_row() -> None:
    """Reuse against a connection per mail through a Postfix of its own (its Maildirs checked
    by the program to hold each mail once): one row."""
    well_formed(table.smtp_rows(mails=5, rounds=2), 1)
