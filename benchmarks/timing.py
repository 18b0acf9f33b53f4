"""Timing benchmark: a program, not a test. Run with ``make bench``; prints two tables.

One real worker (``celery -A workers.app worker``, prefork, concurrency 2) on its own
redis-server (broker db 1, results db 2, limiter and ledger db 0), the in-memory transport.

1. **Late mails.** ``RECIPIENTS`` x ``PER_RECIPIENT`` mails under ``POLICY``; once most are
   booked the worker is stopped (warm shutdown: its countdown mails go back to the queue) for
   ``OUTAGE`` s, then a new worker drains them. Per recipient, the gaps between the ``sent_at``
   of its mails (the worker's clock), the lateness of each sent mail against its last slot, and
   the re-bookings. With re-booking (``MAILGUARD_LATE_TOLERANCE=1s``, the default, and
   ``100ms``) and without (``1h``: the old behaviour), in the same run. A run late by no more
   than the tolerance keeps its slot and goes at once, so two mails may leave up to the
   tolerance closer than the policy: the table counts the gaps under the policy's spacing and
   those under the spacing less the tolerance (beyond the promise); ``left``: mails still not
   sent or dropped ``DRAIN`` s after the restart.
2. **Queue wait by priority.** ``BULK`` default-kind mails (priority 5) are queued to distinct
   recipients, then ``URGENT`` code mails (priority 9) one by one among the last of them. Queue
   wait of a mail: its run's ``decided_at`` minus the moment it was enqueued. Once with the
   kinds' priorities and once with the code mails published at priority 5 (first in, first out).
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from celery.result import AsyncResult

from benchmarks.limiter import _machine
from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.redis_servers import RedisServer
from workers import tasks
from workers.brokers.priority import message_priority

POLICY = "1/1s, 100/1h"
SPACING = 1.0  # seconds: the policy's shortest spacing
RECIPIENTS, PER_RECIPIENT = 100, 5
OUTAGE = 8.0  # seconds without a worker: every booked slot (<= 4 s ahead) passes
BULK, URGENT = 2000, 10
TIMEOUT = 120.0
DRAIN = 60.0  # seconds the restarted worker gets to send the late mails (the rest: unsettled)


def _poll(check: Callable[[], bool], timeout: float, what: str, *, fail: bool = True) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            if not fail:
                return
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def late_mails(redis_url: str, tolerance: str, slack: float) -> dict[str, float]:
    """The outage scenario with ``MAILGUARD_LATE_TOLERANCE=tolerance``; figures by name."""
    env = worker_env(
        redis_url,
        "memory://",
        MAILGUARD_POLICY=POLICY,
        MAILGUARD_MAX_COUNTDOWN="2s",
        MAILGUARD_LATE_TOLERANCE=tolerance,
        MAILGUARD_QUEUE=f"late-{uuid.uuid4().hex[:6]}",
    )
    app = client_app(env)
    send_mail = app.tasks[tasks.send_mail.name]
    worker = CeleryWorker(env, name="first").start()
    results: list[AsyncResult[Any]] = [
        send_mail.apply_async(
            args=[f"late{r}@example.com"],
            kwargs={"subject": "s", "body": "b", "mail_id": f"late-{tolerance}-{r}-{n}"},
        )
        for r in range(RECIPIENTS)
        for n in range(PER_RECIPIENT)
    ]
    booked = RECIPIENTS * (PER_RECIPIENT - 1) * 0.8
    _poll(lambda: sum(r.state == "DEFERRED" for r in results) >= booked, TIMEOUT, "bookings")
    worker.stop()
    time.sleep(OUTAGE)
    again = CeleryWorker(env, name="again").start()
    try:
        _poll(lambda: all(r.ready() for r in results), DRAIN, "every mail", fail=False)
        outcomes = [r.get(timeout=5) for r in results if r.ready()]
    finally:
        again.kill()
        app.close()
    sent = [o for o in outcomes if o["status"] == "sent"]
    by_recipient: dict[str, list[float]] = {}
    for o in sent:
        by_recipient.setdefault(o["recipient"], []).append(float(o["sent_at"]))
    gaps = [b - a for times in by_recipient.values() for a, b in pairwise(sorted(times))]
    lateness = [float(o["sent_at"]) - float(o["due"]) for o in sent if o["due"] is not None]
    return {
        "unsettled": len(results) - len(outcomes),
        "sent": len(sent),
        "closest": min(gaps, default=float("nan")),
        "under_policy": sum(gap < SPACING - 0.02 for gap in gaps),
        "beyond_promise": sum(gap < SPACING - slack - 0.02 for gap in gaps),
        "gaps": len(gaps),
        "late_p50": _pct(lateness, 0.5),
        "late_p99": _pct(lateness, 0.99),
        "rebooked": sum(o["deferrals"] > 1 for o in sent),
    }


def queue_wait(redis_url: str, *, priorities: bool) -> dict[str, list[float]]:
    """Queue wait in seconds by kind, with the kinds' priorities or first in, first out."""
    env = worker_env(
        redis_url,
        "memory://",
        MAILGUARD_POLICY="1/1s",
        MAILGUARD_QUEUE=f"prio-{uuid.uuid4().hex[:6]}",
    )
    app = client_app(env)
    send_mail = app.tasks[tasks.send_mail.name]
    worker = CeleryWorker(env).start()
    enqueued: list[tuple[str, float, AsyncResult[Any]]] = []
    fifo = {} if priorities else {"priority": message_priority(app.conf.broker_url, 5)}
    urgent_every = BULK // (2 * URGENT)
    try:
        for n in range(BULK):
            at = time.time()
            result = send_mail.apply_async(
                args=[f"bulk{n}@example.com"], kwargs={"subject": "news", "body": "b"}
            )
            enqueued.append(("default", at, result))
            if n >= BULK // 2 and n % urgent_every == 0 and len(enqueued) < BULK + URGENT:
                at = time.time()
                result = send_mail.apply_async(
                    args=[f"code{n}@example.com"],
                    kwargs={"kind": "code", "context": {"code": "493112"}},
                    **fifo,
                )
                enqueued.append(("code", at, result))
        _poll(lambda: all(r.ready() for _, _, r in enqueued), TIMEOUT, "every mail")
    finally:
        worker.stop()
        app.close()
    waits: dict[str, list[float]] = {"default": [], "code": []}
    for kind, at, result in enqueued:
        outcome = result.get(timeout=5)
        waits[kind].append(float(outcome["decided_at"]) - at)
    return waits


def main() -> None:
    server = RedisServer().start()
    try:
        print(f"machine: {_machine()}")
        print(
            f"\nlate mails: {RECIPIENTS} recipients x {PER_RECIPIENT} mails under {POLICY}, "
            f"worker stopped {OUTAGE:g} s while they were booked"
        )
        print(
            f"{'':<24}{'sent':>5}{'left':>5}{'closest':>9}{'< 1 s':>10}{'< 1 s - tol':>13}"
            f"{'late p50':>10}{'late p99':>10}{'re-booked':>11}"
        )
        scenarios = (
            ("re-booking, tol 1 s", "1s", 1.0),
            ("re-booking, tol 100 ms", "100ms", 0.1),
            ("no re-booking (old)", "1h", 0.0),
        )
        for label, tolerance, slack in scenarios:
            f = late_mails(server.url, tolerance, slack)
            print(
                f"{label:<24}{f['sent']:>5.0f}{f['unsettled']:>5.0f}{f['closest']:>8.2f}s"
                f"{f['under_policy']:>6.0f}/{f['gaps']:<3.0f}"
                f"{f['beyond_promise']:>9.0f}/{f['gaps']:<3.0f}"
                f"{f['late_p50']:>9.2f}s{f['late_p99']:>9.2f}s{f['rebooked']:>11.0f}"
            )
        print(
            f"\nqueue wait: {BULK} default-kind mails queued, {URGENT} code mails among the "
            "last half (decided_at - enqueue)"
        )
        print(f"{'':<22}{'kind':>8}{'p50':>9}{'p99':>9}{'max':>9}")
        for label, priorities in (("kind priorities", True), ("first in, first out", False)):
            waits = queue_wait(server.url, priorities=priorities)
            for kind in ("code", "default"):
                w = waits[kind]
                print(
                    f"{label if kind == 'code' else '':<22}{kind:>8}{statistics.median(w):>8.2f}s"
                    f"{_pct(w, 0.99):>8.2f}s{max(w):>8.2f}s"
                )
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
