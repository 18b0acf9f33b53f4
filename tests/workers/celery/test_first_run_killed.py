"""A first run killed mid-SMTP is judged when it comes back: a real worker, Redis and SMTP.

The SMTP server holds the first mail's DATA; the pool child sending it is SIGKILLed (nothing
was accepted: a server commits only with its 250). The main process requeues the message; its
copy finds the dead run's claim until the lease ends, then runs with no progress of its own.
Meanwhile a second mail to the same recipient was booked a spacing after the first's admission
and sent on it. The copy, seconds after the slot its first run was admitted at, is judged like
any late run: booked again a spacing after the second mail, not sent on its old slot next to
it. Spacing is checked where it is promised: ``admitted_at`` in the ``sent`` outcomes, on the
limiter's clock. The same on an injected clock: tests/workers/celery/test_first_run_judged.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll

TASK = "mailguard.send_mail"
SPACING = 4.0  # s: the policy 1/4s
TOLERANCE = 0.5  # s: MAILGUARD_LATE_TOLERANCE

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def worker(redis_url: str, smtp_server: SmtpTestServer) -> Iterator[CeleryWorker]:
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="1/4s, 50/1h",
        MAILGUARD_LATE_TOLERANCE="500ms",
        MAILGUARD_CLAIM_LEASE="2s",
    )
    started = CeleryWorker(env, concurrency=1).start()
    yield started
    started.stop(timeout=10)


def test_a_first_run_killed_mid_smtp_is_judged_on_redelivery(
    redis_url: str, smtp_server: SmtpTestServer, worker: CeleryWorker
) -> None:
    """m1's first run is admitted at S and killed inside DATA; m2, enqueued then, is booked at
    S + 4 s and sent there; m1's copy (back after the in-flight wait, past S + tolerance) is
    booked again 4 s after m2: sent once each, never closer than the spacing less the
    tolerance by ``admitted_at``, and the worker log says the copy was judged."""
    app = client_app(worker.env)
    try:
        smtp_server.slow_data(30.0)  # the first DATA only: held until the child dies
        first = app.send_task(TASK, args=["ada@example.com"], kwargs={"subject": "m1", "body": "b"})
        poll(lambda: smtp_server.handler.data_commands == 1, 20, "m1's run to be in DATA")
        worker.kill_child()
        poll(lambda: smtp_server.handler.data_aborted == 1, 10, "the server to drop m1's DATA")
        second = app.send_task(
            TASK, args=["ada@example.com"], kwargs={"subject": "m2", "body": "b"}
        )
        m1, m2 = first.get(timeout=60), second.get(timeout=60)
    finally:
        app.close()
    log = worker.log()
    assert m1["status"] == m2["status"] == "sent", (m1, m2, log[-3000:])
    assert "ran again after its first run ended unfinished: booked again" in log, log[-3000:]
    subjects = sorted(str(d.message["Subject"]) for d in smtp_server.delivered)
    assert subjects == ["m1", "m2"], "one copy each"
    assert m2["admitted_at"] >= m2["due"] and m1["admitted_at"] >= m1["due"]
    assert m1["admitted_at"] - m2["admitted_at"] >= SPACING - TOLERANCE, (m1, m2)
    assert m1["deferrals"] >= 1, "the copy was booked again"
