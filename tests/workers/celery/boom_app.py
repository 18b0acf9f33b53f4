"""mailguard's app with a task that, once running in a pool process, makes the worker's event
loop raise, then sleeps (``tests/workers/celery/test_failing_stop.py``): Celery stops the
worker on an "Unrecoverable error" while that pool process is still running."""

from __future__ import annotations

import os
import time
from typing import Any

from celery import bootsteps

from workers.app import app

#: The task, published to the mail queue the worker consumes.
SLEEP = "tests.workers.celery.boom_app.sleep"

# Made before the pool forks: the pool process writes, the main process's event loop reads.
_READABLE, _WRITABLE = os.pipe()


@app.task(name=SLEEP)
def sleep(seconds: float) -> float:
    os.write(_WRITABLE, b"x")
    time.sleep(seconds)
    return seconds


class Boom(bootsteps.StartStopStep):
    """A reader in the event loop that raises when the running task writes."""

    requires = ("celery.worker.components:Hub",)

    def start(self, worker: Any) -> None:
        def boom(*_: Any) -> None:
            raise RuntimeError("injected into the event loop")

        worker.hub.add_reader(_READABLE, boom)


app.steps["worker"].add(Boom)
