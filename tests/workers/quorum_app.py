"""A project's own Celery app whose default queue is a RabbitMQ quorum queue declared without a
delivery limit (``test_redis_checks.py``): Celery declares ``task_default_queue`` with
``x-queue-type: quorum`` when the app lists no ``task_queues``."""

from __future__ import annotations

import os

from celery import Celery

app = Celery(
    "quorum-project",
    broker=os.environ["MAILGUARD_BROKER_URL"],
    backend=os.environ["MAILGUARD_RESULT_BACKEND"],
    include=["workers.tasks"],
)
app.conf.update(
    task_default_queue=os.environ["MAILGUARD_QUEUE"],
    task_default_queue_type="quorum",
    worker_prefetch_multiplier=1,
    task_serializer="json",
    accept_content=["json"],
)
