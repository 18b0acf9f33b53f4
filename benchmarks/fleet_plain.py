"""The fleet benchmark's floor (:mod:`benchmarks.fleet`): a plain Celery app, one plain task,
the broker and result backend of ``MAILGUARD_BROKER_URL`` and ``MAILGUARD_RESULT_BACKEND``.

Imports nothing of mailguard: a worker of it (``celery -A benchmarks.fleet_plain worker``) costs
its Redis what any Celery worker does, idle.
"""

from __future__ import annotations

import os

from celery import Celery

app = Celery(
    "plain",
    broker=os.environ.get("MAILGUARD_BROKER_URL", "memory://"),
    backend=os.environ.get("MAILGUARD_RESULT_BACKEND") or None,
)
app.conf.task_default_queue = os.environ.get("MAILGUARD_QUEUE", "mail")


@app.task(name="plain.send")
def send(to: str, subject: str, body: str) -> dict[str, str]:  # pragma: no cover (worker side)
    """A plain task: the floor's worker must have one to consume."""
    return {"status": "sent", "subject": subject, "to_length": str(len(to)), "body": body[:0]}
