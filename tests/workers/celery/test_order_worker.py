"""A recipient's mails arrive in the order they were sent: real workers, real producers.

Two producer processes (``send_mail.delay``, as a web process with the workers' ``MAILGUARD_*``
calls it) take turns, each waiting for its call to return before the other sends: 20 mails to
one recipient under ``1/2s``. Two workers of four pool processes each run them, racing for the
limiter; the mails reach the aiosmtpd server (``devservers/smtp_server.py``) in their sending
order, once each, and never closer than the policy allows (``admitted_at``, the limiter's clock,
by the independent checker of ``tests/limits/order_checker.py``). The same with one worker
killed (SIGKILL, its pool with it) mid-stream. The README's step 4 as written, on one worker:
``test_readme_walk_worker.py`` (a file of its own: the suite's processes, one file each, run
it beside these two).

Before the stream a first mail is sent and delivered: the promise holds from the recipient's
first wait on (a mail that finds its recipient with room goes at once, whatever was sent
before it and has not reached the limiter yet: docs/explanation/limiter.md). The same race on
an injected clock, 20 runs of 20: tests/limits/test_order.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from devservers.celery_worker import ROOT, CeleryWorker, client_app, start_all, stop_all, worker_env
from devservers.smtp_server import SmtpTestServer
from tests.limits.order_checker import out_of_order, over_limit
from tests.waiting import poll

MAILS = 20
SPACING = 2.0  # s: the policy 1/2s
TOLERANCE = 0.5  # s: MAILGUARD_LATE_TOLERANCE

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(240)]

#: A producer: for each number read, one ``send_mail.delay`` to ada; prints its task id once
#: the call has returned.
PRODUCER = """
import sys
from workers.tasks import send_mail
for line in sys.stdin:
    n = int(line)
    result = send_mail.delay("ada@example.com", subject=f"m{n:02d}", body="b", mail_id=f"o-{n}")
    print(result.id, flush=True)
"""


class Producer:
    """A process with the workers' settings that sends a mail when told and says when done."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", PRODUCER],
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def send(self, n: int) -> str:
        """Mail ``n`` sent; its task id, read once its ``delay()`` returned."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{n}\n")
        self.process.stdin.flush()
        task_id = self.process.stdout.readline().strip()
        assert task_id, f"producer ended before mail {n}"
        return task_id

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.process.stdout.close()


@pytest.fixture
def env(redis_url: str, smtp_server: SmtpTestServer) -> dict[str, str]:
    return worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="1/2s",
        MAILGUARD_LATE_TOLERANCE=f"{TOLERANCE * 1000:.0f}ms",
        MAILGUARD_PARK_AFTER="1s",  # booked mails wait in the schedule, not in a worker
    )


@pytest.fixture
def workers(env: dict[str, str]) -> Iterator[list[CeleryWorker]]:
    started = start_all([CeleryWorker(env, concurrency=4, name=f"w{i}") for i in (1, 2)])
    yield started
    stop_all(started)


def _stream(env: dict[str, str], smtp_server: SmtpTestServer, kill: CeleryWorker | None) -> None:
    app = client_app(env)
    producers = [Producer(env), Producer(env)]
    try:
        first = app.AsyncResult(producers[0].send(0))
        assert first.get(timeout=30)["status"] == "sent"
        ids = [producers[n % 2].send(n) for n in range(1, MAILS + 1)]
        if kill is not None:  # mid-stream: a quarter of the mails delivered
            poll(lambda: len(smtp_server.delivered) >= 1 + MAILS // 4, 60, "mails delivered")
            kill.kill()
        outcomes = [app.AsyncResult(task_id).get(timeout=150) for task_id in ids]
    finally:
        for producer in producers:
            producer.close()
        app.close()
    _check(smtp_server, outcomes)


def _check(smtp_server: SmtpTestServer, outcomes: list[dict[str, Any]]) -> None:
    assert all(o["status"] == "sent" for o in outcomes), outcomes
    subjects = [str(d.message["Subject"]) for d in smtp_server.delivered]
    expected = [f"m{n:02d}" for n in range(MAILS + 1)]
    assert sorted(subjects) == expected, "each mail once"
    received = {int(s[1:]): float(i) for i, s in enumerate(subjects)}  # places in arrival order
    assert out_of_order(received) == [], subjects
    admitted = [o["admitted_at"] for o in outcomes]
    assert over_limit(admitted, [(1, SPACING)], slack=TOLERANCE) == [], sorted(admitted)
    assert all(o["admitted_at"] >= o["due"] for o in outcomes if o.get("due")), "never early"


def test_twenty_mails_from_two_producers_arrive_in_their_sending_order(
    env: dict[str, str], smtp_server: SmtpTestServer, workers: list[CeleryWorker]
) -> None:
    """2 workers x 4 pool processes, 20 mails sent in turn by two producers: received at the
    SMTP server in the order their ``delay()`` calls returned."""
    _stream(env, smtp_server, kill=None)


def test_the_order_holds_with_a_worker_killed_mid_stream(
    env: dict[str, str], smtp_server: SmtpTestServer, workers: list[CeleryWorker]
) -> None:
    """The same stream; once a quarter is delivered one worker is killed (SIGKILL): the other
    sends the rest, in their sending order, each once."""
    _stream(env, smtp_server, kill=workers[0])
