"""Enqueue benchmark: ``send_mail.apply_async`` with and without the outbox. A program, not a
test (``make bench``).

One fresh redis-server (broker db 1, results db 2, limiter, ledger and outbox db 0); no worker:
the messages stay queued. This process enqueues as a web process does (the enqueue check, the
kind's priority, and with ``MAILGUARD_OUTBOX_GRACE`` on, the outbox entry: one script call on
the ledger's Redis before the publish). Rounds of ``--mails`` calls (default 2 000) alternate
between the outbox off and on, ``--rounds`` each (default 5), the databases flushed between
rounds; the table shows each design's median mails per second, and the floor measured in the
same run: ``app.send_task`` of the same call (Celery's own publish, no check, no outbox).
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


def _round(url: str, env: dict[str, str], mails: int, publish: str) -> float:
    """Mails per second of one round: ``publish`` is ``floor``, ``off`` or ``on``."""
    client = redis.Redis.from_url(url)
    client.flushall()
    client.close()
    settings = Settings.from_env(
        env | {"MAILGUARD_OUTBOX_GRACE": "off" if publish == "off" else "10s"}
    )
    previous = tasks.use_settings(settings)
    app = client_app(env)
    send_mail = app.tasks[TASK]
    send: Callable[[int], Any]
    if publish == "floor":
        send = lambda n: app.send_task(TASK, args=[f"r{n}@example.com"], kwargs=_call(n))  # noqa: E731
    else:
        send = lambda n: send_mail.apply_async(args=[f"r{n}@example.com"], kwargs=_call(n))  # noqa: E731
    try:
        for n in range(20):  # warm: connections, scripts
            send(n)
        started = time.perf_counter()
        for n in range(mails):
            send(n)
        return mails / (time.perf_counter() - started)
    finally:
        app.close()
        tasks.use_settings(previous)


def _call(n: int) -> dict[str, Any]:
    return {"subject": "Your code", "body": f"Code {n:06}", "mail_id": f"bench-{n}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mails", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"enqueue benchmark: {args.mails:,} calls a round, {args.rounds} rounds; {_machine()}")
    server = RedisServer().start()
    try:
        env = worker_env(server.url, "memory://")
        rates: dict[str, list[float]] = {"floor": [], "off": [], "on": []}
        for _ in range(args.rounds):
            for design, measured in rates.items():
                measured.append(_round(server.url, env, args.mails, design))
    finally:
        server.cleanup()
    floor = statistics.median(rates["floor"])
    off = statistics.median(rates["off"])
    print(f"\n{'design':<34} {'mails/s':>9} {'/ floor':>8} {'/ outbox off':>13}")
    for design, label in (
        ("floor", "send_task (Celery's publish)"),
        ("off", "apply_async, MAILGUARD_OUTBOX_GRACE=off"),
        ("on", "apply_async, outbox on (10s)"),
    ):
        rate = statistics.median(rates[design])
        print(f"{label:<34} {rate:>9,.0f} {rate / floor:>8.2f} {rate / off:>13.2f}")


if __name__ == "__main__":
    main()
