"""No herd after a hold, on a real Celery worker, a real Redis and a real SMTP server that shapes
traffic: it answers ``421 4.7.0`` to any mail beyond 5 a second (its own clock). A 120-mail
burst to distinct recipients, with no ``sender:`` tier: the burst meets the limit, one hold,
then a slow start. Checked from the server's own log: after the first hold no 1 s window holds
more than 5 + a small slack of transactions (accepted or refused), every mail is delivered
exactly once, and no second hold starts (later refusals only slow the pace).

The worker counts in a 10 s window (``MAILGUARD_PACE_WINDOW=10s``): at the first refusal while
paced it learns the count the server took in the slow start's last 10 s (some 26) and sends
that many per 11 s, 2.4 a second, not growing. With the default 60 s window it learns the
ramp's whole minute (27 per 66 s) and sends the rest at 0.4 a second: the same promise in some
290 s instead of some 60. Not the server's own 1 s: the learned count, 5 a second, leaves no
room under the limit for the mails of a pool process that stalled (beside two busy loops 9
reached the server in one second)."""

from __future__ import annotations

import bisect
from collections import Counter

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll
from workers import tasks

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(600)]

MAILS = 120  # about 20 s paced after the hold and its slow start
RATE = 5
#: Transactions over the server's rate allowed in one 1 s window: the probe that finds the
#: rate, and the mails a worker's processes had in flight when its refusal came.
SLACK = 3
#: The first hold's length, seconds.
HOLD = 2.0
#: The window the server counts its rate in, seconds.
WINDOW = 1.0
#: The worker's ``MAILGUARD_PACE_WINDOW``, seconds.
PACE_WINDOW = 10.0


def busiest_window(times: list[float], seconds: float = 1.0) -> int:
    """The most of ``times`` (sorted, epoch seconds) within any window of ``seconds``."""
    return max((bisect.bisect_left(times, t + seconds) - i for i, t in enumerate(times)), default=0)


def test_after_a_hold_the_burst_resumes_paced_and_completes_without_a_second_hold(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    smtp_server.limit_rate(RATE, WINDOW)
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="1/60s",
        MAILGUARD_THROTTLE_HOLD=f"{HOLD:g}s",
        MAILGUARD_PACE_WINDOW=f"{PACE_WINDOW:g}s",
    )
    app = client_app(env)
    worker = CeleryWorker(env, name="pace", concurrency=4).start()
    send_mail = app.tasks[tasks.send_mail.name]
    try:
        results = [
            send_mail.apply_async(
                args=(f"reader{n}@example.com",), kwargs={"subject": f"n{n}", "body": "b"}
            )
            for n in range(MAILS)
        ]
        poll(lambda: len(smtp_server.delivered) >= MAILS, 540, "every mail to be delivered")
        poll(lambda: all(r.ready() for r in results), 60, "every mail to settle")
        log = worker.log()
    finally:
        worker.stop()
        app.close()
    outcomes = [r.get(timeout=5) for r in results]
    assert Counter(o["status"] for o in outcomes) == {"sent": MAILS}
    ids = Counter(d.message["Message-ID"] for d in smtp_server.delivered)
    assert len(ids) == MAILS and set(ids.values()) == {1}, "every mail delivered exactly once"
    events = smtp_server.events("RCPT")
    first_refusal = next(t for t, _, _, reply in events if reply.startswith("421"))
    hold_end = first_refusal + HOLD
    after = sorted(t for t, _, _, _ in events if t >= hold_end)
    busiest = busiest_window(after)
    refused = sum(1 for t, _, _, reply in events if t >= hold_end and reply.startswith("421"))
    assert busiest <= RATE + SLACK, (
        f"{busiest} transactions in one second after the hold ({refused} refused in all)"
    )
    notes = [line for line in log.splitlines() if "hold started" in line or "pace s" in line]
    print("\n".join(notes))  # shown when the test fails
    assert log.count("hold started: sender") == 1, "one hold: later refusals slow the pace"
    assert "pace started: sender" in log
