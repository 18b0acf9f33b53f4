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

3. **a burst**: ``--burst`` mails (default 2 000) to distinct recipients, enqueued with
   ``.delay()`` by a process of its own (:mod:`benchmarks.per_mail`'s enqueuer) while the
   fleet consumes: mails/s from the enqueuer's first ``delay()`` to the last stored result
   (polled every 50 ms), against a plain no-op task's, and Redis commands per sent mail over
   the same span (the idle rate taken out), for both fleets;
4. **promotion lateness** (mailguard only): the fleet stops consuming (``cancel_consumer``),
   ``--due`` mails (default 10 000) are parked due at one moment ``LEAD`` seconds ahead, and a
   reader pops the broker's lists every few milliseconds (:class:`benchmarks.schedule_scale.
   Reader`): lateness is when a message is first seen minus its due time, p50 and p99 (the
   fleet's one promoter at a time, under the lease).

Printed per fleet size: both idle rates, the difference, and the target (at most ``10 + 1``
per worker above the floor, issue 45), met or not; then the bursts and the lateness.
"""

from __future__ import annotations

import argparse
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import redis

from benchmarks.per_mail import _run_enqueuer
from benchmarks.schedule_scale import Reader, _entries, _pct, park_bulk
from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.redis_servers import RedisServer
from mailer.records.schedule import RedisSchedule

PARKED = 1_000
WINDOW = 15.0  # seconds between the two reads of the counters
SETTLE = 4.0  # seconds after the last worker is ready before the window opens
FLEETS = (1, 4, 8)
BASE, PER_WORKER = 10.0, 1.0  # the target: at most BASE + PER_WORKER * n above the floor
QUEUE = "mail"
BURST = 2_000
DUE = 10_000
LEAD = 6.0  # seconds from parking to the moment the mails fall due
TIMEOUT = 180.0  # seconds a burst or a promotion may take at most
TASKS = {
    "workers.app": "workers.tasks:send_mail",
    "benchmarks.fleet_plain": "benchmarks.fleet_plain:send",
}


@dataclass
class Idle:
    """One fleet's figures: idle commands per second and the busiest commands (per second);
    its burst's mails/s and commands per sent mail; mailguard's promotion lateness (s)."""

    workers: int
    rate: float
    top: list[tuple[str, float]] = field(default_factory=list)
    burst_rate: float = 0.0
    burst_commands: float = 0.0
    late_p50: float = float("nan")
    late_p99: float = float("nan")


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
    env: dict[str, str],
    count: int,
    app_module: str,
    client: redis.Redis,
    *,
    window: float,
    sizes: tuple[int, int] = (BURST, DUE),
) -> Idle:
    """Start ``count`` workers of ``app_module``, let them settle, measure idle, a burst of
    ``sizes[0]`` mails and (mailguard) the lateness of ``sizes[1]`` due together; stop them."""
    workers = [
        CeleryWorker(env, concurrency=1, name=f"f{n}", app_module=app_module) for n in range(count)
    ]
    try:
        for worker in workers:
            worker.start(timeout=60.0)
        time.sleep(SETTLE)
        rate, top = idle_rate(client, window)
        figures = Idle(count, rate, top)
        if sizes[0]:
            results = redis.Redis.from_url(env["MAILGUARD_RESULT_BACKEND"])
            try:
                figures.burst_rate, span = burst(workers[0].env, app_module, results, sizes[0])
            finally:
                results.close()
            figures.burst_commands = span.per_mail(rate)
        if sizes[1] and app_module == "workers.app":
            figures.late_p50, figures.late_p99 = lateness(env, client, sizes[1])
    finally:
        for worker in workers:
            worker.stop()
    return figures


class _Span:
    """Commands over a burst: read before, then per mail once it is over."""

    def __init__(self, client: redis.Redis, mails: int) -> None:
        self.before, self.start, self.mails = sum(_counts(client).values()), time.monotonic(), mails
        self.after = self.end = 0.0
        self.own = 0

    def close(self, client: redis.Redis, own: int) -> None:
        self.after, self.end, self.own = sum(_counts(client).values()), time.monotonic(), own

    def per_mail(self, idle: float) -> float:
        """Commands per mail, the idle rate (per s) over the span and this program's own
        (the polls, and the first read's ``INFO``) taken out."""
        spent = self.after - self.before - self.own - 1 - idle * (self.end - self.start)
        return spent / self.mails


def burst(
    env: dict[str, str], app_module: str, results: redis.Redis, mails: int
) -> tuple[float, _Span]:
    """Enqueue ``mails`` from a process of its own and wait for every result: mails/s, and the
    span's commands (:class:`_Span`, per mail once given the idle rate)."""
    results.flushdb()
    span = _Span(results, mails)
    began = _run_enqueuer(env, TASKS[app_module], f"burst-{uuid.uuid4().hex[:6]}", mails)
    polls, deadline = 0, time.monotonic() + TIMEOUT
    while int(results.dbsize()) < mails:
        polls += 1
        if time.monotonic() > deadline:
            raise RuntimeError(f"the burst: {results.dbsize()} of {mails} done in {TIMEOUT}s")
        time.sleep(0.05)
    span.close(results, polls + 1)
    rate = mails / (time.time() - began)
    results.flushdb()
    return rate, span


def lateness(env: dict[str, str], client: redis.Redis, count: int) -> tuple[float, float]:
    """Stop the fleet consuming, park ``count`` mails due together, read the broker's lists:
    p50 and p99 of when each was first seen minus its due time (s)."""
    app = client_app(env)
    broker = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
    try:
        app.control.cancel_consumer(QUEUE, reply=True, timeout=5)
        reader = Reader(broker, QUEUE).start()
        schedule = RedisSchedule(
            redis.Redis.from_url(env["MAILGUARD_LIMITER_URL"]),
            env["MAILGUARD_LIMITER_URL"],
            queue=QUEUE,
        )
        due_at = time.time() + LEAD
        entries = list(_entries(count, due_at, 0.0))
        park_bulk(schedule, iter(entries))
        deadline = due_at + TIMEOUT
        while len(reader.seen) < count and time.time() < deadline:
            time.sleep(0.05)
        reader.stop()
        late = [max(reader.seen[m] - d, 0.0) for m, d, _ in entries if m in reader.seen]
        if len(late) < count:
            print(f"  warning: {count - len(late)} of {count} not promoted in {TIMEOUT}s")
        schedule.client.close()
        return _pct(late, 0.5), _pct(late, 0.99)
    finally:
        broker.close()
        app.close()


def park(url: str, count: int) -> int:
    """Park ``count`` mails due in a day in the queue's schedule."""
    schedule = RedisSchedule(redis.Redis.from_url(url), url, queue=QUEUE)
    try:
        return park_bulk(schedule, _entries(count, time.time() + 86_400, 3_600.0))
    finally:
        schedule.client.close()


def run(
    fleets: tuple[int, ...] = FLEETS,
    parked: int = PARKED,
    window: float = WINDOW,
    sizes: tuple[int, int] = (BURST, DUE),
) -> list[tuple[Idle, Idle]]:
    """For each fleet size: (mailguard, plain Celery) figures, on one server flushed and
    parked again before each size."""
    server = RedisServer().start()
    try:
        env = worker_env(server.url, "smtp://127.0.0.1:1", MAILGUARD_QUEUE=QUEUE)
        env["MAILGUARD_SMTP_URL"] = "memory://"
        client = redis.Redis.from_url(server.url)
        rows = []
        for count in fleets:
            client.flushall()
            park(server.url, parked)
            guarded = measure_fleet(env, count, "workers.app", client, window=window, sizes=sizes)
            floor = measure_fleet(
                env, count, "benchmarks.fleet_plain", client, window=window, sizes=sizes
            )
            rows.append((guarded, floor))
        client.close()  # closed, not left to the collector (a test process runs this)
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
    print(
        f"\n{'workers':>7} {'burst mails/s':>14} {'plain':>7} {'ratio':>6} "
        f"{'cmds/mail':>10} {'plain':>6} {'above':>6} {'late p50 s':>11} {'p99 s':>6}"
    )
    for guarded, floor in rows:
        ratio = guarded.burst_rate / floor.burst_rate if floor.burst_rate else float("nan")
        above = guarded.burst_commands - floor.burst_commands
        print(
            f"{guarded.workers:>7} {guarded.burst_rate:>14.0f} {floor.burst_rate:>7.0f} "
            f"{ratio:>6.2f} {guarded.burst_commands:>10.1f} {floor.burst_commands:>6.1f} "
            f"{above:>+6.1f} {guarded.late_p50:>11.3f} {guarded.late_p99:>6.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default=",".join(map(str, FLEETS)), help="e.g. 1,4,8")
    parser.add_argument("--parked", type=int, default=PARKED)
    parser.add_argument("--window", type=float, default=WINDOW, help="seconds")
    parser.add_argument("--burst", type=int, default=BURST, help="mails (0: no burst)")
    parser.add_argument("--due", type=int, default=DUE, help="mails due together (0: none)")
    args = parser.parse_args()
    fleets = tuple(int(n) for n in args.workers.split(","))
    print_rows(run(fleets, args.parked, args.window, (args.burst, args.due)))


if __name__ == "__main__":
    main()
