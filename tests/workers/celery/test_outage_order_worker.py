"""Order survives an outage, in a real worker: a recipient's late mails go in booked order.

A worker holds four booked mails of one recipient (countdowns, 3 s apart) when it is stopped;
it starts again once every slot has passed, and the four runs come back at once, in whatever
order the broker restores them. They go in their booked order, the first at once, each next
one a spacing after it: never closer than the policy's spacing less the tolerance, measured
where it is promised (``admitted_at`` in the ``sent`` outcomes, on the limiter's clock). The
same on an injected clock, every arrival order: tests/guard/test_outage_order.py.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from celery.result import AsyncResult

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll

TASK = "mailguard.send_mail"
SPACING = 3.0  # s: the policy 1/3s
TOLERANCE = 0.5  # s: MAILGUARD_LATE_TOLERANCE
BOOKED = 4

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]


def _send(app: Any, n: int) -> AsyncResult[Any]:
    kwargs = {"subject": f"m{n}", "body": "b", "mail_id": f"order-{n}"}
    return app.send_task(TASK, args=["ada@example.com"], kwargs=kwargs)


def test_late_mails_go_in_their_booked_order_after_a_worker_was_stopped(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """Five mails: one sent, four booked 3 s apart (in the order the pool took them); the
    worker stopped; started again 1 s after the last slot: the four sent in the order of
    their slots, ``admitted_at`` at least 2.5 s apart, once each."""
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="1/3s, 50/1h",
        MAILGUARD_LATE_TOLERANCE="500ms",
    )
    app = client_app(env)
    worker = CeleryWorker(env, name="before").start()
    try:
        results = [_send(app, n) for n in range(BOOKED + 1)]
        poll(
            lambda: sorted(r.state for r in results) == ["DEFERRED"] * BOOKED + ["SUCCESS"],
            20,
            "m0 sent, the others booked " + worker.log()[-2000:],
        )
        slots = {r.info["mail_id"]: r.info["due"] for r in results if r.state == "DEFERRED"}
        last_slot = max(slots.values())
    finally:
        worker.stop()
    time.sleep(max(0.0, last_slot + 1.0 - time.time()))  # the outage: every slot passes
    again = CeleryWorker(env, name="after").start()
    try:
        outcomes = [r.get(timeout=60) for r in results]
    finally:
        again.stop()
        app.close()
    assert all(o["status"] == "sent" for o in outcomes), outcomes
    subjects = [str(d.message["Subject"]) for d in smtp_server.delivered]
    assert sorted(subjects) == [f"m{n}" for n in range(BOOKED + 1)], "one copy each"
    booked_order = sorted(slots, key=slots.__getitem__)  # the pool may take them in any order
    late = sorted((o for o in outcomes if o["mail_id"] in slots), key=lambda o: o["admitted_at"])
    seen = [(o["mail_id"], o["due"], o["admitted_at"], o["deferrals"]) for o in late]
    lines = "\n".join(line for line in again.log().splitlines() if "mailguard" in line)
    assert [o["mail_id"] for o in late] == booked_order, f"{seen}\n{lines}"
    for a, b in itertools.pairwise(late):
        assert b["admitted_at"] - a["admitted_at"] >= SPACING - TOLERANCE, late
    assert all(o["admitted_at"] >= o["due"] for o in outcomes), "never before its slot"
