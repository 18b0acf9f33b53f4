"""A real Celery worker under a scoped policy: the sender scope paces mails to many recipients."""

from __future__ import annotations

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from tests.smtp_server import SmtpTestServer
from tests.waiting import poll
from workers import tasks

#: Seconds by which two SMTP receive times may look closer than the policy allows: the time
#: between a worker's admission and the server's receipt varies by a little per mail.
SLACK = 0.3


def test_twelve_mails_to_twelve_recipients_are_paced_by_the_sender_scope(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """Given sender: 4/2s (recipients loose), when 12 mails to 12 recipients are enqueued at
    once, then all are sent and, by the SMTP server's own clock, no 2 s holds more than 4."""
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="recipient: 10/1s; sender: 4/2s",
        MAILGUARD_MAX_COUNTDOWN="2s",
    )
    app = client_app(env)
    send_mail = app.tasks[tasks.send_mail.name]
    worker = CeleryWorker(env).start()
    try:
        results = [
            send_mail.apply_async(
                args=[f"user{n}@example.com"],
                kwargs={"subject": f"n{n}", "body": "x", "tenant": "acme" if n % 2 else None},
            )
            for n in range(12)
        ]
        poll(lambda: all(r.ready() for r in results), 40, "every mail to settle")
    finally:
        worker.stop()
        app.close()
    outcomes = [r.get(timeout=1) for r in results]
    assert {o["status"] for o in outcomes} == {"sent"}, outcomes
    times = sorted(d.received_at for d in smtp_server.delivered)
    assert len(times) == 12
    gaps = [times[i + 4] - times[i] for i in range(len(times) - 4)]
    assert min(gaps) >= 2.0 - SLACK, gaps
    assert times[-1] - times[0] >= 4.0 - SLACK


def test_a_bad_tenant_is_refused_at_delay() -> None:
    """send_mail.delay with a tenant of 65 characters raises at once, naming the tenant."""
    with pytest.raises(ValueError, match="tenant must be a str of 1 to 64"):
        tasks.send_mail.delay("ada@example.com", subject="s", body="b", tenant="x" * 65)
