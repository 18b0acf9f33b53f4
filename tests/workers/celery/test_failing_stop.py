"""A worker whose event loop raised ends on its own with exit code 70 (real worker, Redis)."""

from __future__ import annotations

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from tests.waiting import poll
from tests.workers.celery.boom_app import SLEEP
from workers.process.failing_stop import EXIT_RESTART, STOP_LIMIT

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]


def test_a_worker_stopping_on_an_unrecoverable_error_ends_with_a_restartable_code(
    redis_url: str,
) -> None:
    """Given a pool process running a task much longer than the stop limit, an error raised in
    the worker's event loop makes Celery stop it ("Unrecoverable error"); the process ends by
    itself (no signal from here), with exit code 70 and one line saying why, before the task
    could have ended."""
    env = worker_env(redis_url, "console://")
    app = client_app(env)
    worker = CeleryWorker(env, app_module="tests.workers.celery.boom_app").start()
    assert worker.process is not None
    try:
        app.send_task(SLEEP, args=[6 * STOP_LIMIT], queue="mail")
        poll(lambda: worker.process is not None and worker.process.poll() is not None, 60, "exit")
    finally:
        worker.kill()
        app.close()
    log = worker.log()
    assert worker.process.returncode == EXIT_RESTART, log[-3000:]
    assert "Unrecoverable error: RuntimeError('injected into the event loop')" in log
    assert "did not end 10 s after an unrecoverable error; exiting 70" in log
    assert "succeeded in" not in log, "the process ended before the task did"
