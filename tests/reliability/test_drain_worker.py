"""A backlog drains, on a real Celery worker, a real Redis and a real SMTP server: a burst of
mails bigger than the worker (each recipient's mails booked 1 s apart, the server slowed so the
worker sends fewer a second than fall due) with a 100 ms late tolerance. Checked from the
server's own log and the worker's: every mail delivered exactly once, no two of one recipient's
mails reaching the server (RCPT) closer than the spacing less the tolerance (and an allowance
for the latency from admission to RCPT on a loaded machine: the spacing is promised at
admission), and no mail moving back more often than its recipient has other mails (the overdue
bookings of its recipient no longer push it back: it is booked again only behind a mail of its
recipient sent less than the spacing before).
Throughput and the re-bookings counted: make bench (benchmarks/drain.py)."""

from __future__ import annotations

import itertools
import re
from collections import Counter, defaultdict

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll
from workers import tasks

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(400)]

RECIPIENTS, PER_RECIPIENT = 60, 6
SPACING, TOLERANCE = 1.0, 0.1
#: Seconds one mail's way from admission to the server's RCPT may exceed another's (the build,
#: the connection, a pool process not scheduled): the spacing is promised at admission, on the
#: limiter's clock, not at the server. With the suite's other workers on two cores it varies by
#: tens of ms on a quiet machine (a pair at 0.87 s) and by a few tenths on a slow one (CI: one
#: pair of 300 at 0.57 s, the next closest 0.83 s). Bunching, which the check is for, puts pairs
#: within a few tens of ms (the same mails without the late rule: benchmarks/drain.py).
LATENCY = 0.5
#: Each DATA answered this much later: the worker (concurrency 2) sends at most ~40 a second.
SLOW = 0.05
BOOKED_AGAIN = re.compile(r"mail (\S+) ran \S+ after its slot: booked again")


def test_a_backlog_drains_with_the_spacing_kept_and_no_mail_moving_back_for_long(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    total = RECIPIENTS * PER_RECIPIENT
    # The first mails (one a recipient) go at full speed, so the others fall due faster than
    # the slowed server lets the worker send them: most runs start late.
    smtp_server.slow_data(0.0, times=RECIPIENTS)
    smtp_server.slow_data(SLOW, times=2 * total)
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="1/1s, 100/1h",
        MAILGUARD_LATE_TOLERANCE=f"{TOLERANCE * 1000:g}ms",
    )
    app = client_app(env)
    worker = CeleryWorker(env, name="drain", concurrency=2).start()
    send_mail = app.tasks[tasks.send_mail.name]
    try:
        results = [
            send_mail.apply_async(
                args=(f"reader{r}@example.com",),
                kwargs={"subject": f"n{n}", "body": "b", "mail_id": f"drain-{r}-{n}"},
            )
            for r in range(RECIPIENTS)  # one recipient's mails together: booked 1 s apart
            for n in range(PER_RECIPIENT)
        ]
        poll(lambda: len(smtp_server.delivered) >= total, 300, "every mail to be delivered")
        poll(lambda: all(r.ready() for r in results), 60, "every mail to settle")
        log = worker.log()
    finally:
        worker.stop()
        app.close()
    assert Counter(r.get(timeout=5)["status"] for r in results) == {"sent": total}
    ids = Counter(d.message["Message-ID"] for d in smtp_server.delivered)
    assert len(ids) == total and set(ids.values()) == {1}, "every mail delivered exactly once"
    # When each mail reached the server (its RCPT, on the server's clock: before the DATA delay
    # this server adds, whose own timing is not the mail's), one recipient's in order.
    times: dict[str, list[float]] = defaultdict(list)
    for at, _, address, reply in smtp_server.events("RCPT"):
        if reply.startswith("250"):
            times[address].append(at)
    gaps = [b - a for ts in times.values() for a, b in itertools.pairwise(sorted(ts))]
    assert len(gaps) == total - RECIPIENTS, "one accepted RCPT per mail"
    # The promise holds at admission, on the limiter's clock; a mail reaches RCPT after the
    # message is built and the connection opened: LATENCY at most between two of them.
    close = [g for g in gaps if g < SPACING - TOLERANCE - LATENCY]
    least = sorted(gaps)[:5]
    assert close == [], f"{len(close)} pairs closer than {SPACING - TOLERANCE - LATENCY} s: {least}"
    # The backlog made runs late: kept within the tolerance ("sent now"), or booked again past
    # it (beside two busy loops, one run in 20 had every late run past the 100 ms).
    late = "after its slot: sent now" in log or BOOKED_AGAIN.search(log) is not None
    assert late, "the backlog made runs late"
    again = Counter(BOOKED_AGAIN.findall(log))
    # Each time a late mail is booked again, a mail of its recipient was sent less than the
    # spacing before (a distinct one each time): no mail moves back more often than its
    # recipient has other mails, however late the backlog makes it.
    most = max(again.values(), default=0)
    assert most < PER_RECIPIENT, f"a mail booked again {most} times: {again.most_common(3)}"
