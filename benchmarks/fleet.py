"""Fleet benchmark: what a fleet of idle workers costs its Redis. A program, not a test
(``python -m benchmarks.fleet``; bounded, it stops by itself).

One fresh redis-server, laid out as the README deploys it (limiter and ledger db 0, broker
db 1, results db 2). ``--parked`` mails (default 1 000) are parked in the schedule due in a
day, written with the schedule's own ``park.lua`` (no worker), so the schedule is not empty
and nothing falls due. Then, for each fleet size of ``--workers`` (default 1, 4 and 8):

1. **mailguard**: that many ``celery -A workers.app worker`` processes (prefork, concurrency
   1) on the server; once every one is ready and ``SETTLE``
   seconds have passed, the server's ``INFO commandstats`` is read twice ``--window`` seconds
   apart (default 15): commands per second of the whole deployment (commands run inside
   scripts count too; this program's own ``INFO`` calls are taken out), and the busiest
   commands;
2. **plain Celery**: as many workers of :mod:`benchmarks.fleet_plain` (a Celery app with one
   plain task and the same broker and result backend, no mailguard) measured the same way:
   the floor.

Printed per fleet size: both rates, the difference, and the target (at most ``10 + 1`` per
worker above the floor, issue 45), met or not.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from benchmarks.schedule_scale import _entries, park_bulk
from devservers.celery_worker import CeleryWorker, worker_env
from devservers.redis_servers import RedisServer
from mailer.records.schedule import RedisSchedule

PARKED = 1_000
WINDOW = 15.0  # seconds between the two reads of the counters
SETTLE = 4.0  # seconds after the last worker is ready before the window opens
FLEETS = (1, 4, 8)
BASE, PER_WORKER = 10.0, 1.0  # the target: at most BASE + PER_WORKER * n above the floor
QUEUE = "mail"


@dataclass
class Idle:
    """One fleet's idle cost: commands per second, and the busiest commands (per second)."""

    workers: int
    rate: float
    top: list[tuple[str, float]] = field(default_factory=list)


def _counts(client: redis.Redis) -> dict[str, int]:
    stats: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def idle_rate(client: redis.Redis, window: float) -> tuple[float, list[tuple[str, float]]]:
    """Commands per second the server ran over ``window`` seconds (this call's ``INFO`` out)."""
    before = _counts(client)
    start = time.monotonic()
    time.sleep(window)
    after = _counts(client)
    span = time.monotonic() - start
    delta = {name: after[name] - before.get(name, 0) for name in after}
    delta["info"] = delta.get("info", 0) - 1  # the second read; the first is in ``before``
    total = sum(delta.values())
    top = sorted(((n, c / span) for n, c in delta.items() if c > 0), key=lambda t: -t[1])
    return total / span, top[:6]


def measure_fleet(
    env: dict[str, str], count: int, app_module: str, client: redis.Redis, window: float
) -> Idle:
    """Start ``count`` workers of ``app_module``, let them settle, measure, stop them."""
    workers = [
        CeleryWorker(env, concurrency=1, name=f"f{n}", app_module=app_module) for n in range(count)
    ]
    try:
        for worker in workers:
            worker.start(timeout=60.0)
        time.sleep(SETTLE)
        rate, top = idle_rate(client, window)
    finally:
        for worker in workers:
            worker.stop()
    return Idle(count, rate, top)


def park(url: str, count: int) -> int:
    """Park ``count`` mails due in a day in the queue's schedule."""
    schedule = RedisSchedule(redis.Redis.from_url(url), url, queue=QUEUE)
    return park_bulk(schedule, _entries(count, time.time() + 86_400, 3_600.0))


def run(
    fleets: tuple[int, ...] = FLEETS, parked: int = PARKED, window: float = WINDOW
) -> list[tuple[Idle, Idle]]:
    """For each fleet size: (mailguard, plain Celery) idle figures, on one fresh server."""
    server = RedisServer().start()
    try:
        env = worker_env(server.url, "smtp://127.0.0.1:1", MAILGUARD_QUEUE=QUEUE)
        env["MAILGUARD_SMTP_URL"] = "memory://"
        client = redis.Redis.from_url(server.url)
        park(server.url, parked)
        rows = []
        for count in fleets:
            guarded = measure_fleet(env, count, "workers.app", client, window)
            floor = measure_fleet(env, count, "benchmarks.fleet_plain", client, window)
            rows.append((guarded, floor))
        return rows
    finally:
        server.stop()


def met(guarded: Idle, floor: Idle) -> bool:
    """The issue's target: at most BASE + PER_WORKER per worker above the floor."""
    return guarded.rate - floor.rate <= BASE + PER_WORKER * guarded.workers


def print_rows(rows: list[tuple[Idle, Idle]]) -> None:
    print(f"{'workers':>7} {'mailguard/s':>12} {'plain/s':>8} {'above':>7} {'target':>7}  met")
    for guarded, floor in rows:
        target = BASE + PER_WORKER * guarded.workers
        above = guarded.rate - floor.rate
        verdict = "yes" if met(guarded, floor) else "no"
        print(
            f"{guarded.workers:>7} {guarded.rate:>12.1f} {floor.rate:>8.1f} "
            f"{above:>+7.1f} {target:>7.1f}  {verdict}"
        )
    for guarded, _ in rows:
        busiest = ", ".join(f"{name} {rate:.1f}" for name, rate in guarded.top)
        print(f"  {guarded.workers} mailguard workers, busiest commands/s: {busiest}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default=",".join(map(str, FLEETS)), help="e.g. 1,4,8")
    parser.add_argument("--parked", type=int, default=PARKED)
    parser.add_argument("--window", type=float, default=WINDOW, help="seconds")
    args = parser.parse_args()
    fleets = tuple(int(n) for n in args.workers.split(","))
    print_rows(run(fleets, args.parked, args.window))


if __name__ == "__main__":
    main()
