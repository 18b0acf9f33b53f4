"""Redis commands per sent mail, counted as a deployment runs. A program, not a test
(``python -m benchmarks.per_mail``; bounded, it stops by itself).

Two layouts, each on fresh redis-servers:

- **one server**, as the README deploys it: limiter and ledger db 0, broker db 1, results db 2;
- **split**: the broker and the results on one server, the limiter and the ledger on another.

In each, one real worker (``celery -A <app> worker``, prefork, concurrency 2) drains
``--mails`` mails (default 300) to distinct recipients that a process of its own enqueues with
``.delay(address, subject, body)`` as an application does; every server's ``INFO
commandstats`` is read before the enqueuer starts and once the last result is stored (commands
run inside scripts count; this program's own ``INFO`` and polling calls are taken out, and so is
what the idle worker costs over the same span, measured just before). Per mail for:

- ``mailguard``: ``workers.app``'s ``send_mail`` under the reference policy, memory transport
  (the SMTP conversation costs Redis nothing);
- ``plain``: :mod:`benchmarks.fleet_plain`'s task with the same broker and result backend, no
  mailguard: the floor.

``--monitor`` also prints, for the one-server layout, the commands of the guarded mails by
client kind (the enqueuer, the worker's pool, the worker's main process) from ``MONITOR``.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis

from devservers.celery_worker import CeleryWorker, worker_env
from devservers.redis_servers import RedisServer

MAILS = 300
WARMUP = 20  # mails sent before the count
IDLE_WINDOW = 4.0  # seconds of idle measured before each run
TIMEOUT = 60.0  # seconds for a run's mails to be done
TARGET = 8.0  # at most this many commands more per mail than the plain task (issue 45)
POLICY = "1/60s, 5/1h, 10/24h"
APPS = {
    "mailguard": ("workers.app", "workers.tasks:send_mail"),
    "plain": ("benchmarks.fleet_plain", "benchmarks.fleet_plain:send"),
}

_ENQUEUE = """
import importlib, sys
module, name = sys.argv[1].split(":")
task = getattr(importlib.import_module(module), name)
tag, count = sys.argv[2], int(sys.argv[3])
import time
print(time.time(), flush=True)
for i in range(count):
    task.delay(f"user-{tag}-{i}@example.com", "Your code", "Your code is 493 112.")
"""


@dataclass
class Count:
    """Commands per sent mail of one app in one layout, and the idle rate taken out."""

    app: str
    layout: str
    per_mail: float
    idle_per_s: float


def _calls(clients: list[redis.Redis]) -> int:
    total = 0
    for client in clients:
        stats: dict[str, Any] = client.info("commandstats")
        total += sum(int(v["calls"]) for v in stats.values())
    return total


def _idle(clients: list[redis.Redis], window: float) -> float:
    before = _calls(clients)
    start = time.monotonic()
    time.sleep(window)
    after = _calls(clients)
    own = len(clients)  # the second read's INFO calls (the first are in ``before``)
    return (after - before - own) / (time.monotonic() - start)


def _wait_done(results: redis.Redis, count: int) -> int:
    """Poll the results' database (it holds nothing else) until ``count`` results are stored;
    how many commands this sent."""
    sent, deadline = 0, time.monotonic() + TIMEOUT
    while True:
        stored = int(results.dbsize())
        sent += 1
        if stored >= count:
            return sent
        if time.monotonic() > deadline:
            raise RuntimeError(f"{stored} of {count} results after {TIMEOUT}s")
        time.sleep(0.25)


def count_one(
    env: dict[str, str],
    *,
    app: str,
    layout: str,
    clients: list[redis.Redis],
    results: redis.Redis,
    mails: int,
) -> Count:
    """Start a worker of ``app``, warm it up, then count ``mails`` mails end to end."""
    module, task = APPS[app]
    tag = f"{app}-{layout.replace(' ', '-')}"
    worker = CeleryWorker(env, concurrency=2, name=tag, app_module=module)
    child_env = worker.env
    try:
        worker.start(timeout=60.0)
        _run_enqueuer(child_env, task, f"warm-{tag}", WARMUP)
        _wait_done(results, WARMUP)
        results.flushdb()
        idle = _idle(clients, IDLE_WINDOW)
        before = _calls(clients)
        start = time.monotonic()
        _run_enqueuer(child_env, task, tag, mails)
        own = _wait_done(results, mails)
        span = time.monotonic() - start
        after = _calls(clients)
        results.flushdb()
    finally:
        worker.stop()
    ours = own + len(clients)  # the polling, and the first read's INFO (in ``after``)
    return Count(app, layout, (after - before - ours - idle * span) / mails, idle)


def _run_enqueuer(env: dict[str, str], task: str, tag: str, count: int) -> float:
    """Run the enqueuer of ``count`` mails of ``task``; when its first ``delay()`` began
    (epoch s: after its imports)."""
    done = subprocess.run(
        [sys.executable, "-c", _ENQUEUE, task, tag, str(count)],
        env=env,
        check=True,
        timeout=TIMEOUT,
        capture_output=True,
        text=True,
    )
    return float(done.stdout.split()[0])


def run(mails: int = MAILS, monitor: bool = False) -> list[Count]:
    """Both apps in both layouts."""
    counts: list[Count] = []
    for layout in ("one server", "split"):
        servers = [RedisServer().start() for _ in range(1 if layout == "one server" else 2)]
        opened: list[redis.Redis] = []  # closed at the end, not left to the collector
        try:
            first = servers[0].url.rsplit("/", 1)[0]
            ledger = servers[-1].url.rsplit("/", 1)[0]
            env = worker_env(
                servers[0].url,
                "memory://",
                MAILGUARD_POLICY=POLICY,
                MAILGUARD_LIMITER_URL=f"{ledger}/0",
            )
            clients = [redis.Redis.from_url(s.url) for s in servers]
            results = redis.Redis.from_url(f"{first}/2")
            opened += [*clients, results]
            for app in APPS:
                if monitor and layout == "one server":
                    print(f"{app}, one server, per mail (MONITOR):")
                    _print_monitor(env, app, clients[0], results, mails)
                counts.append(
                    count_one(
                        env, app=app, layout=layout, clients=clients, results=results, mails=mails
                    )
                )
        finally:
            for client in opened:
                client.close()
            for server in servers:
                server.stop()
    return counts


def _print_monitor(
    env: dict[str, str], app: str, client: redis.Redis, results: redis.Redis, mails: int
) -> None:
    """The guarded mails' commands by command name and database, from MONITOR."""
    seen: collections.Counter[str] = collections.Counter()
    stop = threading.Event()

    def listen() -> None:
        with client.monitor() as monitor:  # type: ignore[no-untyped-call]
            for item in monitor.listen():
                if stop.is_set():
                    return
                command = item["command"].split(" ", 1)[0].strip('"').upper()
                seen[
                    f"db{item['db']} {command} {'lua' if item['client_type'] == 'lua' else ''}"
                ] += 1

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    time.sleep(0.5)
    count_one(env, app=app, layout="monitor", clients=[client], results=results, mails=mails)
    stop.set()
    client.ping()
    for name, n in seen.most_common(40):
        print(f"  {n / (mails + WARMUP):6.2f}  {name}")


def print_counts(counts: list[Count]) -> None:
    print(f"{'layout':<11} {'mailguard':>10} {'plain':>7} {'above':>7} {'target':>7}  met")
    by = {(c.app, c.layout): c for c in counts}
    for layout in ("one server", "split"):
        ours, floor = by["mailguard", layout], by["plain", layout]
        above = ours.per_mail - floor.per_mail
        print(
            f"{layout:<11} {ours.per_mail:>10.1f} {floor.per_mail:>7.1f} {above:>+7.1f} "
            f"{TARGET:>+7.1f}  {'yes' if above <= TARGET else 'no'}"
            f"   (idle taken out: {ours.idle_per_s:.1f} / {floor.idle_per_s:.1f} per s)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mails", type=int, default=MAILS)
    parser.add_argument("--monitor", action="store_true")
    args = parser.parse_args()
    os.environ.pop("MAILGUARD_LIMITER_URL", None)
    print_counts(run(args.mails, args.monitor))


if __name__ == "__main__":
    main()
