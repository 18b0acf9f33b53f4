"""The README's step 4 as written, on a real worker: one worker of four pool processes,
``1/20s, 3/1h``; mail 1 sent, mails 2, 3, 4 sent in turn from a producer process: booked +20 s,
+40 s and +1 h, whichever pool process ran which first, each once. The slots are read from the
limiter's answers (``due``, the limiter's clock); the two first are waited for (about 45 s), so
that the SMTP server's log shows them sent in that order.

Beside the order stream of ``test_order_worker.py`` in a file of its own: the suite's processes
(``pytest -n``, one file each) then run the two in parallel. The same walk on an injected clock,
whatever order the runs come in: tests/limits/test_order.py and tests/guard/test_sending_order.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from devservers.celery_worker import ROOT, CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(240)]

#: The README's step 4, in one producer: mail 1 sent (waited for), then mails 2, 3, 4 in turn.
README_WALK = """
from workers.tasks import send_mail
first = send_mail.delay("ada@example.com", subject="Hello", body="The first mail.")
print(first.id, first.get(timeout=30)["status"], flush=True)
more = [send_mail.delay("ada@example.com", subject=f"Mail {n}", body="Hello") for n in (2, 3, 4)]
print(" ".join(m.id for m in more), flush=True)
"""


def test_the_readme_walk_books_20s_40s_1h_in_that_order(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """README steps 3-5: ``1/20s, 3/1h``, one worker of four pool processes; mail 1 sent, mails
    2, 3, 4 sent in turn: 2 leaves at +20 s, 3 at +40 s, 4 stays booked at +1 h, whichever
    pool process ran which first; each once. (About 45 s: the two slots are waited for.)"""
    env = worker_env(redis_url, smtp_server.url, MAILGUARD_POLICY="1/20s, 3/1h")
    worker = CeleryWorker(env, concurrency=4, name="readme").start()
    app = client_app(env)
    try:
        walk = subprocess.run(
            [sys.executable, "-c", README_WALK],
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        first_line, more_line = walk.stdout.splitlines()
        first_id, status = first_line.split()
        assert status == "sent"
        more = [app.AsyncResult(task_id) for task_id in more_line.split()]
        t1 = app.AsyncResult(first_id).get(timeout=10)["admitted_at"]
        mail_2 = more[0].get(timeout=60)
        mail_3 = more[1].get(timeout=60)
        poll(lambda: more[2].state == "DEFERRED" and more[2].info["due"] > t1 + 60, 30, "mail 4")
        mail_4 = more[2].info
    finally:
        worker.stop()
        app.close()
    assert (mail_2["status"], mail_3["status"]) == ("sent", "sent")
    assert mail_2["due"] == pytest.approx(t1 + 20, abs=0.002)
    assert mail_3["due"] == pytest.approx(t1 + 40, abs=0.002)
    assert mail_4["due"] == pytest.approx(t1 + 3600, abs=0.002)
    subjects = [str(d.message["Subject"]) for d in smtp_server.delivered]
    assert subjects == ["Hello", "Mail 2", "Mail 3"]
