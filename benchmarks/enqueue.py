"""Enqueue benchmark: ``send_mail.apply_async`` with and without the outbox. A program, not a
test (``make bench``).

One fresh redis-server (broker db 1, results db 2, limiter, ledger and outbox db 0); no worker:
the messages stay queued. This process enqueues as a web process does (the enqueue check, the
kind's priority, and with ``MAILGUARD_OUTBOX_GRACE`` on, the outbox entry: one script call on
the ledger's Redis, written before the publish, its answer read later). Short rounds of
``--mails`` calls (default 600) alternate between the designs, ``--rounds`` each (default 15),
so that the designs of a round meet the same load. For each design: the median mails per
second, and the CPU each call costs, this process's and the Redis server's (``INFO cpu``):
on a shared machine the wall clock follows the neighbours, the CPU does not. The floor is
measured in the same run: ``app.send_task`` of the same call (Celery's own publish, no check,
no outbox). Last, the outbox on / off per round (adjacent in time) and its median.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import redis

from benchmarks.limiter import _machine
from devservers.celery_worker import client_app, worker_env
from devservers.redis_servers import RedisServer
from mailer.settings import Settings
from workers import tasks

TASK = "mailguard.send_mail"
DESIGNS = (
    ("floor", "send_task (Celery's publish)"),
    ("off", "apply_async, outbox off"),
    ("on", "apply_async, outbox on"),
)


def _server_cpu(client: redis.Redis) -> float:
    """The Redis server's CPU seconds so far (user and system)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _round(
    client: redis.Redis, env: dict[str, str], mails: int, design: str
) -> tuple[float, float, float]:
    """One round of ``design``: mails per second, and this process's and the server's CPU per
    call (microseconds)."""
    grace = "off" if design == "off" else "10s"
    previous = tasks.use_settings(Settings.from_env(env | {"MAILGUARD_OUTBOX_GRACE": grace}))
    app = client_app(env)
    send_mail = app.tasks[TASK]
    send: Callable[[int], Any]
    if design == "floor":
        send = lambda n: app.send_task(TASK, args=[f"r{n}@example.com"], kwargs=_call(n))  # noqa: E731
    else:
        send = lambda n: send_mail.apply_async(args=[f"r{n}@example.com"], kwargs=_call(n))  # noqa: E731
    try:
        for n in range(20):  # warm: connections, scripts
            send(n)
        server, cpu, started = _server_cpu(client), time.process_time(), time.perf_counter()
        for n in range(mails):
            send(n)
        elapsed = time.perf_counter() - started
        mine, theirs = time.process_time() - cpu, _server_cpu(client) - server
        return mails / elapsed, mine / mails * 1e6, theirs / mails * 1e6
    finally:
        app.close()
        tasks.use_settings(previous)


def _call(n: int) -> dict[str, Any]:
    return {"subject": "Your code", "body": f"Code {n:06}", "mail_id": f"bench-{n}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mails", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(f"enqueue benchmark: {args.mails:,} calls a round, {args.rounds} rounds; {_machine()}")
    server = RedisServer().start()
    rows: dict[str, list[tuple[float, float, float]]] = {design: [] for design, _ in DESIGNS}
    try:
        env = worker_env(server.url, "memory://")
        client = redis.Redis.from_url(server.url)
        client.flushall()
        for _ in range(args.rounds):
            for design, measured in rows.items():
                measured.append(_round(client, env, args.mails, design))
        client.close()
    finally:
        server.cleanup()
    _table(rows)


def _table(rows: dict[str, list[tuple[float, float, float]]]) -> None:
    med = {
        d: [statistics.median(column) for column in zip(*r, strict=True)] for d, r in rows.items()
    }
    off_rate, off_cpu = med["off"][0], med["off"][1] + med["off"][2]
    head = f"{'mails/s':>8} {'/ off':>6} {'µs CPU here':>12} {'µs Redis':>9} {'CPU / off':>10}"
    print(f"\n{'design':<30} {head}")
    for design, label in DESIGNS:
        rate, mine, theirs = med[design]
        print(
            f"{label:<30} {rate:>8,.0f} {rate / off_rate:>6.2f} {mine:>12.0f} {theirs:>9.0f}"
            f" {(mine + theirs) / off_cpu:>10.2f}"
        )
    paired = [on[0] / off[0] for on, off in zip(rows["on"], rows["off"], strict=True)]
    print(
        f"\noutbox on / off, mails/s round by round: median {statistics.median(paired):.2f} "
        f"(each {', '.join(f'{r:.2f}' for r in paired)})"
    )


if __name__ == "__main__":
    main()
