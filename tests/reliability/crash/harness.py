"""One crash test's stack: Redis, the SMTP server, a worker that dies at a crash point, a clean one.

Settings are short so that each test takes seconds: a claim lease of :data:`CLAIM_LEASE`, a
broker visibility timeout of :data:`VISIBILITY` (a killed worker's unacknowledged messages come
back that long after it took them, swept every 0.5 s), a promotion lease of 1 s, and a policy of
one mail per :data:`SPACING` per recipient (:data:`PROMISE`; :data:`WINDOWED` adds a tier).
Mails are enqueued by a producer process (:mod:`tests.reliability.crash.produce`) with the workers'
settings, as ``send_mail.delay`` is in production. The doomed worker runs one pool process,
so ``point:n`` counts one process's runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from celery import Celery

from devservers.celery_worker import ROOT, CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from mailer.crashpoints import VARIABLE
from tests.reliability.crash.checker import Mail, Promise, Report, check
from tests.waiting import poll

#: Seconds: the claim lease, the visibility timeout and one recipient's spacing.
CLAIM_LEASE = 3.0
VISIBILITY = 5.0
SPACING = 2.0
LATE_TOLERANCE = 1.0  # MAILGUARD_LATE_TOLERANCE's default
MAX_WAIT = 60.0  # the default kind's max wait here
#: How long the outbox waits for a claim before the watchdog publishes a mail again (the
#: variable the outbox reads; seconds).
OUTBOX_GRACE = ("MAILGUARD_OUTBOX_GRACE", "2s")
PROMISE = Promise(
    tiers=((1, SPACING), (50, 3600.0)),
    late_tolerance=LATE_TOLERANCE,
    claim_lease=CLAIM_LEASE,
    max_waits={"default": MAX_WAIT},
)
#: :data:`PROMISE` with a second tier, three mails in 10 s: a run sent late on a slot it
#: took before a crash bunches a recipient's mails within it.
WINDOWED = replace(PROMISE, tiers=((1, SPACING), (3, 10.0)))
#: For a worker that will die: no sweep of the broker's unacked messages. A worker killed
#: inside kombu's sweep leaves its mutex (``unacked_mutex``) held for ``unacked_mutex_expire``
#: (300 s), and no worker restores anything until then: a crash point of its own, which these
#: tests do not mean to hit by chance (every 0.5 s here).
NO_SWEEP = {"MAILGUARD_RESTORE_INTERVAL": "1h"}
#: Seconds for everything to settle after the clean worker is ready: the visibility timeout,
#: the claim lease, three spacings, and room for a loaded machine.
SETTLE = VISIBILITY + CLAIM_LEASE + 3 * SPACING + 30


def crash_env(
    redis_url: str, smtp: SmtpTestServer, promise: Promise, **extra: str
) -> dict[str, str]:
    """The workers' (and the producer's) ``MAILGUARD_*`` variables."""
    return worker_env(
        redis_url,
        smtp.url,
        MAILGUARD_POLICY=", ".join(f"{count}/{window:g}s" for count, window in promise.tiers),
        MAILGUARD_CLAIM_LEASE=f"{CLAIM_LEASE:g}s",
        MAILGUARD_VISIBILITY_TIMEOUT=f"{VISIBILITY:g}s",
        MAILGUARD_RESTORE_INTERVAL="500ms",
        MAILGUARD_PROMOTE_LEASE="1s",
        MAILGUARD_KIND_DEFAULT_MAX_WAIT=f"{MAX_WAIT:g}s",
        **extra,
    )


class CrashRun:
    """A test's run: enqueue, a doomed worker, a clean worker, the outcomes, the check."""

    def __init__(
        self, redis_url: str, smtp: SmtpTestServer, promise: Promise = PROMISE, **extra: str
    ) -> None:
        self.smtp = smtp
        self.promise = promise
        self.env = crash_env(redis_url, smtp, promise, **extra)
        self.app: Celery = client_app(self.env)
        self.mails: list[Mail] = []
        self.workers: list[CeleryWorker] = []
        self.restart = 0.0

    def __enter__(self) -> CrashRun:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for worker in self.workers:
            if worker.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.process.pid, signal.SIGKILL)
                worker.process.wait(timeout=10)
        self.app.close()

    def command(self, module: str, *args: str, crash_at: str | None = None) -> _Done:
        """``python -m module args`` with the workers' settings, in a session of its own (a
        crash point kills it alone); its exit status and output once it ended."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
        env |= self.env | {"PYTHONPATH": str(ROOT)}
        if crash_at:
            env[VARIABLE] = crash_at
        process = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        out, err = process.communicate(timeout=60)
        return _Done(process.returncode, out, err)

    def produce(self, *specs: tuple[str, str], crash_at: str | None = None) -> _Done:
        """Enqueue (recipient, mail id) pairs from a producer process; with ``crash_at`` it
        dies there. Each mail enqueued is kept, with when."""
        args = [f"{to}={mail_id}" for to, mail_id in specs]
        process = self.command("tests.reliability.crash.produce", *args, crash_at=crash_at)
        out, err = process.out, process.err
        to_of = {mail_id: to for to, mail_id in specs}
        for line in out.splitlines():
            mail_id, at = line.split()
            self.mails.append(Mail(mail_id, to_of[mail_id], float(at)))
        assert crash_at or process.returncode == 0, err[-2000:]
        return process

    def send(self, *specs: tuple[str, str]) -> None:
        """Enqueue (recipient, mail id) pairs, the producer living."""
        self.produce(*specs)

    def doomed(self, point: str, **extra: str) -> CeleryWorker:
        """A worker (one pool process) that dies at ``point``; it may die before it is ready
        (the promoter starts before the consumer)."""
        env = self.env | {VARIABLE: point, **NO_SWEEP} | extra
        worker = CeleryWorker(env, name="doomed", concurrency=1)
        self.workers.append(worker)
        started = time.monotonic()
        try:
            worker.start(timeout=30)
        except RuntimeError:
            assert worker.process is not None and worker.process.poll() == -signal.SIGKILL, (
                worker.log()[-2000:]
            )
            assert time.monotonic() - started < 30
        return worker

    def clean(self, name: str = "clean", **extra: str) -> CeleryWorker:
        """A worker without a crash point."""
        worker = CeleryWorker(self.env | extra, name=name).start()
        self.workers.append(worker)
        return worker

    def wait_dead(self, worker: CeleryWorker, timeout: float = 30) -> None:
        """Wait until ``worker`` died at its crash point (SIGKILL, its pool with it)."""
        poll(
            lambda: worker.process is not None and worker.process.poll() is not None,
            timeout,
            "the doomed worker to die at its crash point " + worker.log()[-2000:],
        )
        assert worker.process is not None and worker.process.returncode == -signal.SIGKILL
        poll(lambda: not _group_alive(worker.process.pid), 10, "the doomed worker's pool to go")

    def restart_clean(self) -> CeleryWorker:
        """The clean worker, its ready time kept for the lateness promise."""
        worker = self.clean()
        self.restart = time.time()
        return worker

    def outcomes(self, timeout: float = SETTLE) -> dict[str, dict[str, Any]]:
        """Each mail's final outcome, once every one is ready."""
        results = {mail.mail_id: self.app.AsyncResult(mail.mail_id) for mail in self.mails}
        try:
            poll(lambda: all(r.ready() for r in results.values()), timeout, "every mail to end")
        except AssertionError as exc:
            states = {m: r.state for m, r in results.items()}
            logs = "".join(w.log()[-3000:] for w in self.workers[-1:])
            raise AssertionError(f"{exc}: {states} {logs}") from None
        return {mail_id: _final(result.result) for mail_id, result in results.items()}

    def check(self, *, accept_then_drop: bool = False) -> Report:
        """The five promises (tests/reliability/crash/checker.py) over every mail enqueued."""
        report = check(
            self.mails,
            self.outcomes(),
            self.smtp,
            self.promise,
            restart=self.restart,
            accept_then_drop=accept_then_drop,
        )
        print(report.line())
        return report


def _group_alive(group: int) -> bool:
    """Whether a process of process group ``group`` still runs (zombies do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group and fields[0] != "Z":
                return True
    return False


@dataclass(frozen=True)
class _Done:
    """A finished process: its exit status (negative: the signal), stdout and stderr."""

    returncode: int
    out: str
    err: str


def _final(result: Any) -> dict[str, Any]:
    """A result's outcome dict (a failed mail's exception carries it as its argument)."""
    if isinstance(result, dict):
        return result
    args = getattr(result, "args", ())
    assert args and isinstance(args[0], dict), f"not an outcome: {result!r}"
    return dict(args[0])
