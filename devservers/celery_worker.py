"""A real Celery worker in a subprocess (``celery -A workers.app worker``), configured by env.

Tests and the guard benchmark start it against their own redis-server (and aiosmtpd), read its
log, stop it, or kill its main process or a pool child with SIGKILL. :func:`start_all` and
:func:`stop_all` start and stop several side by side (a start takes a second or two, a warm
shutdown some 3 s: a fleet's are not added up).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from celery import Celery

from mailer.settings import Settings
from workers.app import create_app

ROOT = Path(__file__).resolve().parent.parent


def worker_env(redis_url: str, smtp_url: str, **extra: str) -> dict[str, str]:
    """MAILGUARD_* variables for a worker on ``redis_url`` (db 0 limiter, 1 broker, 2 results)."""
    base = redis_url.rsplit("/", 1)[0]
    env = {
        "MAILGUARD_BROKER_URL": f"{base}/1",
        "MAILGUARD_RESULT_BACKEND": f"{base}/2",
        "MAILGUARD_LIMITER_URL": f"{base}/0",
        "MAILGUARD_SMTP_URL": smtp_url,
        "MAILGUARD_POLICY": "1/1s, 3/5s, 5/20s",
        "MAILGUARD_SECRET": "test-secret",
        "MAILGUARD_SENDER": "mailguard@example.org",
        "MAILGUARD_RETRY_BACKOFF": "200ms",
        "MAILGUARD_SMTP_ATTEMPTS": "2",
    }
    env.update(extra)
    return env


def client_app(env: dict[str, str]) -> Celery:
    """A Celery app in the test process with the worker's configuration, to enqueue and read."""
    return create_app(Settings.from_env(env))


class CeleryWorker:
    """``celery -A workers.app worker`` as a subprocess with ``env`` on top of this process's.

    ``loglevel`` is the ``--loglevel`` argument (None: not given). ``app_module`` is the
    ``-A`` argument: another module exposing the same app (with more tasks registered on it, as
    the guard benchmark does) may be given instead of ``workers.app``.
    """

    def __init__(
        self,
        env: dict[str, str],
        *,
        pool: str = "prefork",
        concurrency: int = 2,
        name: str = "w1",
        app_module: str = "workers.app",
        events: bool = False,
        loglevel: str | None = "INFO",
    ) -> None:
        self.env = (
            {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
            | env
            | {"PYTHONPATH": str(ROOT)}
        )
        self.pool = pool
        self.concurrency = concurrency
        self.name = name
        self.app_module = app_module
        self.events = events  # -E: send task events (Flower, celery events)
        self.loglevel = loglevel  # --loglevel; None: Celery's default (WARNING), as the README's
        self.log_path = Path(tempfile.mkdtemp(prefix="mailguard-worker-")) / "worker.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> CeleryWorker:
        """Start the worker and wait until it is ready (at most ``timeout`` seconds)."""
        return self.launch().wait_ready(timeout)

    def launch(self) -> CeleryWorker:
        """Start the worker's process without waiting for it (:meth:`wait_ready` waits)."""
        self.log_path.write_text("")
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                self.app_module,
                "worker",
                "--pool",
                self.pool,
                "--concurrency",
                str(self.concurrency),
                "--hostname",
                f"{self.name}@%h",
                *(["--loglevel", self.loglevel] if self.loglevel else []),
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                *(["-E"] if self.events else []),
            ],
            env=self.env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    def wait_ready(self, timeout: float = 30.0) -> CeleryWorker:
        """Wait until the launched worker logs ``ready.``; kill it and raise if it does not
        within ``timeout`` seconds (or exits)."""
        assert self.process is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "ready." in self.log():
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        output = self.log()[-3000:]
        self.kill()
        raise RuntimeError(f"celery worker did not become ready:\n{output}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def children(self) -> list[int]:
        """PIDs of the pool's child processes."""
        assert self.process is not None
        path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in path.read_text().split()]

    def kill_child(self) -> None:
        """SIGKILL one pool child (the main process replaces it)."""
        os.kill(self.children()[0], signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL the main process and its children at once, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self, timeout: float = 20.0) -> None:
        """Warm shutdown (SIGTERM); SIGKILL if it takes longer than ``timeout`` seconds."""
        stop_all([self], timeout)


def start_all(workers: Sequence[CeleryWorker], timeout: float = 30.0) -> list[CeleryWorker]:
    """Start ``workers`` side by side (each process launched, then each waited for), so that
    a fleet takes one worker's start rather than their sum; every one is killed if one fails."""
    try:
        for worker in workers:
            worker.launch()
        for worker in workers:
            worker.wait_ready(timeout)
    except BaseException:
        for worker in workers:
            worker.kill()
        raise
    return list(workers)


def stop_all(workers: Sequence[CeleryWorker], timeout: float = 20.0) -> None:
    """Warm shutdown of ``workers`` side by side: SIGTERM to each running one, then each waited
    for (a warm shutdown takes some 3 s, most of it Celery's pool closing); one that takes longer
    than ``timeout`` seconds from the signals is killed."""
    running = [w for w in workers if w.process is not None and w.process.poll() is None]
    for worker in running:
        assert worker.process is not None
        worker.process.terminate()
    deadline = time.monotonic() + timeout
    for worker in running:
        assert worker.process is not None
        try:
            worker.process.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            worker.kill()
