"""A worker that stops on an unrecoverable error ends, within :data:`STOP_LIMIT` seconds, with
an exit code a supervisor restarts (:data:`EXIT_RESTART`).

Celery ends a worker whose event loop raised (``Unrecoverable error: ...`` at CRITICAL: the
prefork pool's ``UnpicklingError`` on a result half read when the broker connection dropped is
one) with a warm stop. With the prefork pool (Celery 5.7, billiard 4.3) that stop can wait for
ever: the pool's result handler keeps flushing the children's queues
(``asynpool._flush_outqueue``) after every run has ended, and the process neither consumes nor
exits. A supervisor that restarts a process which exited does nothing for it. And when it does
exit, its code is 1, which ``RestartPreventExitStatus=1`` (a configuration the worker refused,
``examples/mailguard-worker.service``) keeps from being restarted.

So :class:`FailingStopStep`, stopped before the pool, sees the failure (the worker's exit code
is 1 then), turns the code into :data:`EXIT_RESTART`, and arms a timer that ends the process
if it still runs :data:`STOP_LIMIT` seconds later. Pool processes in the middle of a mail
finish it (they are not killed, and record it in the ledger); the messages the worker held come
back from the broker and the ledger answers them. A stop asked for by a signal (TERM, INT) is
left alone: its supervisor bounds it (``TimeoutStopSec``). So is a worker that runs in a thread
of another program (:mod:`workers.brokers.inprocess`): ending the process is not its to do.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from celery import bootsteps

log = logging.getLogger("mailguard.worker")

#: Seconds a worker stopping on an unrecoverable error has to end on its own.
STOP_LIMIT = 10.0
#: Its exit code (``EX_SOFTWARE``): not 1, so a supervisor that does not restart a refused
#: configuration still restarts it.
EXIT_RESTART = 70
#: Celery's exit code for an unrecoverable error (``celery.platforms.EX_FAILURE``).
EX_FAILURE = 1


def _end(limit: float) -> None:
    log.critical(
        "mailguard: the worker did not end %.0f s after an unrecoverable error; exiting %d",
        limit,
        EXIT_RESTART,
    )
    logging.shutdown()
    os._exit(EXIT_RESTART)


def arm(limit: float = STOP_LIMIT) -> threading.Timer:
    """End this process with :data:`EXIT_RESTART` in ``limit`` seconds unless it ends first."""
    timer = threading.Timer(limit, _end, args=(limit,))
    timer.daemon = True
    timer.start()
    return timer


class FailingStopStep(bootsteps.StartStopStep):
    """At a worker's stop on an unrecoverable error: exit code :data:`EXIT_RESTART`, and the
    process ended if it has not ended :data:`STOP_LIMIT` seconds later."""

    label = "mailguard failing stop"
    # Started after the pool, so stopped before it: the pool's stop is what can wait for ever.
    requires = ("celery.worker.components:Pool",)

    def stop(self, worker: Any) -> None:
        # Only a worker that is its process's main program (``celery worker``): a worker run
        # by a thread of another program (workers.brokers.inprocess) must never end that program.
        if threading.current_thread() is not threading.main_thread():
            return
        if getattr(worker, "exitcode", None) == EX_FAILURE:
            worker.exitcode = EXIT_RESTART
            arm()

    def terminate(self, parent: Any) -> None:
        self.stop(parent)
