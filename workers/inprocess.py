"""A worker inside the current process: for the memory broker (the demo, embedded defaults).

Uses a threads pool, so the memory limiter, ledger and transport are shared by every run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.worker import WorkController


@contextmanager
def inprocess_worker(app: Celery, *, concurrency: int = 4) -> Iterator[WorkController]:
    """Run a threads-pool worker of ``app`` in this process until the block ends."""
    with start_worker(
        app,
        pool="threads",
        concurrency=concurrency,
        perform_ping_check=False,
        loglevel="WARNING",
        shutdown_timeout=10.0,
    ) as worker:
        yield worker
