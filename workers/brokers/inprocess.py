"""A worker inside the current process: for the memory broker (the demo, embedded defaults).

A plain Celery :class:`~celery.worker.WorkController` (``app.WorkController``) with a threads
pool, run by a daemon thread: the memory limiter, ledger and transport are shared by every run.
What Celery's own test helper (``celery.contrib.testing.worker``) does, with public APIs only:

- make ``app`` the current and default app and set up its logging at ``loglevel`` (what
  ``celery worker`` does before it starts; the ``after_setup_logger`` hooks run as usual);
- build the worker without gossip, mingle or heartbeats (one worker, nobody to talk to) and
  start it in a daemon thread;
- wait until its consumer is ready (its ``ready_callback``) before handing it over, so mails
  sent in the block are taken at once; a worker that dies while starting raises instead;
- allow waiting for results in the block (``allow_join_result``: the pool marks joins as
  blocking, which only holds inside a task);
- at the end of the block, a warm shutdown (``worker.stop()``: a mail being sent finishes)
  and the thread joined within ``shutdown_timeout``.

No ping task is sent: the ready callback already says the consumer takes messages.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from celery import Celery
from celery.result import allow_join_result
from celery.worker import WorkController

#: How long the worker may take to become ready, and to stop, in seconds.
START_TIMEOUT = 30.0
SHUTDOWN_TIMEOUT = 10.0


@contextmanager
def inprocess_worker(app: Celery, *, concurrency: int = 4) -> Iterator[WorkController]:
    """Run a threads-pool worker of ``app`` in this process until the block ends."""
    ready = threading.Event()
    app.finalize()
    app.set_current()
    app.set_default()
    app.log.setup(loglevel=logging.WARNING)
    worker = app.WorkController(
        concurrency=concurrency,
        pool="threads",
        loglevel=logging.WARNING,
        ready_callback=lambda _consumer: ready.set(),
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
    )
    thread = threading.Thread(target=worker.start, name="mailguard-inprocess-worker", daemon=True)
    thread.start()
    try:
        _wait_ready(ready, thread)
        with allow_join_result():
            yield worker
    finally:
        _stop(worker, thread)


def _wait_ready(ready: threading.Event, thread: threading.Thread) -> None:
    """Block until the consumer is ready; raise if the worker thread ended or took too long."""
    deadline = time.monotonic() + START_TIMEOUT
    while not ready.wait(timeout=0.05):
        if not thread.is_alive():
            raise RuntimeError("the in-process worker stopped while starting (see its log)")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the in-process worker was not ready within {START_TIMEOUT:g} s")


def _stop(worker: WorkController, thread: threading.Thread) -> None:
    """Warm shutdown: the consumer stops taking mails, the pool finishes the running ones."""
    worker.stop()
    thread.join(SHUTDOWN_TIMEOUT)
    if thread.is_alive():
        raise RuntimeError(f"the in-process worker did not stop within {SHUTDOWN_TIMEOUT:g} s")
