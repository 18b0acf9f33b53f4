"""Drain benchmark: a program, not a test. Run with ``make bench`` (or ``python -m
benchmarks.drain [--recipients N] [--per-recipient N]``); prints one table.

A backlog bigger than the worker: ``RECIPIENTS`` x ``PER_RECIPIENT`` mails (5 000 by default)
enqueued in one burst under ``POLICY`` (1 s between one recipient's mails), so each recipient's
mails are booked 1 s apart, all due within about 10 s, for one real worker (prefork,
concurrency 2) that sends far fewer a second: most runs start late. The worker sends through
SMTP to a local aiosmtpd server (``devservers/smtp_server.py``) whose own log is the checker:

- ``mails/s``: mails delivered / (last delivery - first enqueue), and its ratio to the same
  mails **without the guard's late rule** (``MAILGUARD_LATE_TOLERANCE=1h``: a late run keeps its
  slot and goes at once, so a recipient's mails may bunch);
- ``< 1 s - tol``: pairs of one recipient's consecutive deliveries closer than the policy's
  spacing less the tolerance (the promise: 0), and ``< 1 s`` closer than the spacing itself;
- ``booked again``: late runs the limiter booked again (log lines ``ran ... after its slot:
  booked again``), the mails booked again that way more than once (``twice+``) and the most
  times one mail was (``most``; each time behind a mail of its recipient sent less than the
  spacing before, so never more than its recipient's other mails).
"""

from __future__ import annotations

import argparse
import re
import time
import uuid
from collections import Counter, defaultdict
from itertools import pairwise

from benchmarks.limiter import _machine
from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from workers import tasks

POLICY = "1/1s, 100/1h"
SPACING = 1.0  # seconds: the policy's shortest spacing
RECIPIENTS, PER_RECIPIENT = 500, 10
TIMEOUT = 600.0
_BOOKED_AGAIN = re.compile(r"mail (\S+) ran \S+ after its slot: booked again")


def drain(
    redis_url: str, tolerance: str, slack: float, mails: tuple[int, int], policy: str = POLICY
) -> dict[str, float]:
    """The burst with ``MAILGUARD_LATE_TOLERANCE=tolerance``; ``slack`` its seconds."""
    recipients, per = mails
    total = recipients * per
    with SmtpTestServer() as smtp:
        env = worker_env(
            redis_url,
            smtp.url,
            MAILGUARD_POLICY=policy,
            MAILGUARD_LATE_TOLERANCE=tolerance,
            MAILGUARD_QUEUE=f"drain-{uuid.uuid4().hex[:6]}",
        )
        app = client_app(env)
        send_mail = app.tasks[tasks.send_mail.name]
        worker = CeleryWorker(env, name=f"drain-{tolerance}").start()
        try:
            start = time.time()
            for r in range(recipients):  # one recipient's mails together: booked 1 s apart
                for n in range(per):
                    send_mail.apply_async(
                        args=(f"reader{r}@example.com",),
                        kwargs={"subject": f"n{n}", "body": "b", "mail_id": f"d-{start}-{r}-{n}"},
                    )
            deadline = time.monotonic() + TIMEOUT
            while len(smtp.delivered) < total and time.monotonic() < deadline:
                time.sleep(0.2)
            log = worker.log()
        finally:
            worker.stop()
            app.close()
        delivered = smtp.delivered
    times: dict[str, list[float]] = defaultdict(list)
    for mail in delivered:
        times[mail.rcpt_tos[0]].append(mail.received_at)
    gaps = [b - a for ts in times.values() for a, b in pairwise(sorted(ts))]
    again = Counter(_BOOKED_AGAIN.findall(log))
    last = max((m.received_at for m in delivered), default=start)
    return {
        "sent": len(delivered),
        "seconds": last - start,
        "rate": len(delivered) / max(last - start, 1e-9),
        "gaps": len(gaps),
        "under_policy": sum(g < SPACING for g in gaps),
        "beyond_promise": sum(g < SPACING - slack for g in gaps),
        "booked_again": sum(again.values()),
        "twice": sum(1 for n in again.values() if n > 1),
        "most": max(again.values(), default=0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--recipients", type=int, default=RECIPIENTS)
    parser.add_argument("--per-recipient", type=int, default=PER_RECIPIENT)
    parser.add_argument("--only", metavar="TOLERANCE", help="one scenario: 1h, 1s or 100ms")
    parser.add_argument(
        "--policy",
        default=POLICY,
        help="the policy (its recipient tiers must space mails 1 s apart, e.g. "
        "'recipient: 1/1s, 100/1h; sender: 1000/1s' for a scoped policy)",
    )
    args = parser.parse_args()
    mails = (args.recipients, args.per_recipient)
    server = RedisServer().start()
    try:
        print(f"machine: {_machine()}")
        print(
            f"\ndrain: {mails[0]} recipients x {mails[1]} mails under {args.policy}, one burst, "
            "one worker (concurrency 2), SMTP to a local server (its log checks the spacing)"
        )
        print(
            f"{'':<26}{'sent':>6}{'drain':>9}{'mails/s':>9}{'ratio':>7}{'< 1 s':>12}"
            f"{'< 1 s - tol':>13}{'booked again':>14}{'twice+':>8}{'most':>6}"
        )
        scenarios = (
            ("no late rule (1h)", "1h", 0.0),
            ("late rule, tol 1 s", "1s", 1.0),
            ("late rule, tol 100 ms", "100ms", 0.1),
        )
        base = 0.0
        for label, tolerance, slack in scenarios:
            if args.only is not None and tolerance != args.only:
                continue
            f = drain(server.url, tolerance, slack, mails, args.policy)
            base = base or f["rate"]
            print(
                f"{label:<26}{f['sent']:>6.0f}{f['seconds']:>8.1f}s{f['rate']:>9.1f}"
                f"{f['rate'] / base:>7.2f}{f['under_policy']:>6.0f}/{f['gaps']:<5.0f}"
                f"{f['beyond_promise']:>7.0f}/{f['gaps']:<5.0f}"
                f"{f['booked_again']:>14.0f}{f['twice']:>8.0f}{f['most']:>6.0f}"
            )
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
