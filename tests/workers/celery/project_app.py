"""A project's own Celery app that runs mailguard's ``send_mail`` (``test_own_app.py`` here).

What a project writes: its app, its broker and result backend, and ``workers.tasks`` among
its includes. mailguard's settings (limiter, SMTP, secret) still come from ``MAILGUARD_*``.
"""

from __future__ import annotations

import os

from celery import Celery

app = Celery(
    "project",
    broker=os.environ["PROJECT_BROKER_URL"],
    backend=os.environ["PROJECT_RESULT_BACKEND"],
    include=["workers.tasks"],
)
app.conf.update(
    task_default_queue=os.environ.get("PROJECT_QUEUE", "celery"),
    worker_prefetch_multiplier=1,
    task_serializer="json",
    accept_content=["json"],
)
