"""The demo's run: start the SMTP capture and an in-process worker, play the script, poll states.

:func:`run_demo` enqueues each mail of the script at its time through the real ``send_mail``
task, reads every unsettled mail's state on each tick (:data:`TICK`) into its :class:`Row`, and
hands the :class:`Run` to the view. With ``--redis`` the run first checks that Redis answers
and at the end deletes its own queue.

Logs stay quiet (:func:`quiet_logs`): the worker logs at WARNING, and its log lines never carry
addresses. Ctrl-C stops the worker and the SMTP server and raises :class:`DemoInterrupted`.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from celery import Celery

from mailer import Policy
from mailer.errors import mask_url
from mailer.settings import Settings
from workers.demo.capture import SmtpCapture
from workers.demo.rows import Burst, Row
from workers.demo.story import (
    BURST_AT,
    MAX_WAIT,
    OUTAGE_AT,
    OUTAGE_FOR,
    RECIPIENTS,
    DemoError,
    DemoInterrupted,
    burst_addresses,
    configure,
    demo_settings,
    script,
)
from workers.waiting.outcomes import read_state

#: The in-process worker's pool threads.
CONCURRENCY = 4
#: How often the table and the states are refreshed, in seconds.
TICK = 0.05


@dataclass
class Run:
    """The state of one demo run, handed to the view on every tick."""

    settings: Settings
    speed: float
    rows: list[Row]
    smtp: SmtpCapture
    started: float = 0.0
    elapsed: float = 0.0
    captured: Counter[str] = field(default_factory=Counter)
    outage: tuple[float, float] = (0.0, 0.0)  # the worker's pause: from, until (s after start)
    paused: bool = False
    burst: Burst = field(default_factory=lambda: Burst(0.0, [], ""))

    @property
    def policy(self) -> Policy:
        return self.settings.policy

    def violations(self) -> list[str]:
        """Tiers some recipient went over, recounted from the slots of its sent mails."""
        found = []
        for name in RECIPIENTS:
            sent = sorted(
                r.due
                for r in self.rows
                if r.planned.to == name and r.state == "sent" and r.due is not None
            )
            for tier in self.policy.tiers:
                for first, last in zip(sent, sent[tier.limit :], strict=False):
                    if last - first < tier.window - 1e-6:
                        found.append(f"{name}: {tier.limit + 1} mails within {tier}")
                        break
        return found

    def recipient_summary(self, name: str) -> dict[str, Any]:
        """``name``'s totals: mails, sent, deferred, dropped, largest lateness, SMTP captured."""
        mine = [r for r in self.rows if r.planned.to == name]
        late = [r.lateness for r in mine if r.lateness is not None]
        address = RECIPIENTS[name].address
        return {
            "address": address,
            "mails": len(mine),
            "sent": sum(r.state == "sent" for r in mine),
            "deferred": sum(r.booked is not None for r in mine),
            "dropped": sum(r.state == "dropped" for r in mine),
            "failed": sum(r.state == "failed" for r in mine),
            "unsettled": sum(not r.settled for r in mine),
            "max_lateness": max(late, default=None),
            "captured": self.captured.get(address, 0),
        }

    def summary(self) -> dict[str, Any]:
        """The JSON summary: the policy, every mail, per recipient totals, the checks."""
        lateness = [r.lateness for r in self.rows if r.lateness is not None and r.booked]
        return {
            "policy": str(self.policy),
            "tiers": [{"limit": t.limit, "window": t.window} for t in self.policy.tiers],
            "max_wait": {k: self.settings.kinds[k].max_wait for k in MAX_WAIT},
            "speed": self.speed,
            "broker": mask_url(self.settings.broker_url),
            "started": self.started,
            "elapsed": round(self.elapsed, 3),
            "mails": [r.as_dict() for r in self.rows],
            "recipients": {name: self.recipient_summary(name) for name in RECIPIENTS},
            "max_lateness_deferred": max(lateness, default=None),
            "outage": {"from": self.outage[0], "until": self.outage[1]},
            "rebooked": sum(r.rebooked for r in self.rows),
            "burst": self.burst.summary(),
            "captured": sum(self.captured.get(r.address, 0) for r in RECIPIENTS.values()),
            "violations": self.violations(),
            "complete": all(r.settled for r in self.rows) and self.burst.done,
        }


def run_demo(
    *,
    redis_url: str | None = None,
    speed: float = 1.0,
    view: Callable[[Run], None] | None = None,
    done: Callable[[Run], None] | None = None,
    timeout: float | None = None,
) -> Run:
    """Play the story; call ``view(run)`` on every tick; return the finished run.

    ``done(run)`` is called once every mail has settled, before the worker stops (a threads
    worker on the memory broker takes a moment to notice it should stop): the summary need
    not wait for it.

    Raises :class:`DemoError` (Redis unreachable, mails still unsettled after ``timeout``) and
    :class:`DemoInterrupted` on Ctrl-C, after the worker and the SMTP server have stopped.
    """
    from workers.app import app  # noqa: PLC0415 - Celery and the env's app only when run
    from workers.brokers.inprocess import inprocess_worker  # noqa: PLC0415
    from workers.tasks import send_mail  # noqa: PLC0415

    if redis_url:
        _check_redis(redis_url)
    smtp = SmtpCapture()
    settings: Settings | None = None
    try:
        smtp.start()
        settings = demo_settings(smtp.url, speed=speed, redis_url=redis_url)
        configure(app, settings)
        run = _new_run(settings, speed, smtp)
        limit = timeout if timeout is not None else 30 + max(r.at for r in run.rows) + 50 / speed
        pause = _pause_task(app)
        with inprocess_worker(app, concurrency=CONCURRENCY):
            _play(run, app, send_mail, view, limit=limit, pause=pause)
            if done is not None:
                done(run)
        return run
    except KeyboardInterrupt:
        raise DemoInterrupted() from None
    finally:
        smtp.stop()
        if redis_url and settings is not None:
            _delete_queue(redis_url, settings.queue)


def _pause_task(app: Celery) -> Any:
    """A task that keeps one pool thread busy for ``seconds``: the story's worker pause.

    The demo sends one per pool thread: while they run, the mails whose slot comes are held
    back (the pool is full) and run late, as behind a stuck worker or a backlog.
    """

    def pause(seconds: float) -> None:
        time.sleep(seconds)

    return app.task(name="mailguard.demo.pause", shared=False)(pause)


def _new_run(settings: Settings, speed: float, smtp: SmtpCapture) -> Run:
    """A run of the script at ``speed``: one row per mail, none enqueued yet."""
    rows = [
        Row(n, planned, RECIPIENTS[planned.to].address, planned.at / speed)
        for n, planned in enumerate(script(), start=1)
    ]
    outage = (OUTAGE_AT / speed, (OUTAGE_AT + OUTAGE_FOR) / speed)
    burst = Burst(BURST_AT / speed, burst_addresses(), RECIPIENTS["dee"].address)
    return Run(settings, speed, rows, smtp, outage=outage, burst=burst)


def _play(
    run: Run,
    app: Celery,
    send_mail: Any,
    view: Callable[[Run], None] | None,
    *,
    limit: float,
    pause: Any,
) -> None:
    waiting = list(run.rows)
    run.started = time.time()
    paused = False
    while True:
        now = time.time()
        run.elapsed = now - run.started
        if not paused and run.elapsed >= run.outage[0]:
            paused = True
            for _ in range(CONCURRENCY):
                pause.apply_async(args=[run.outage[1] - run.outage[0]], priority=0)
        run.paused = paused and run.elapsed < run.outage[1]
        burst_now = run.burst.enqueued_at is None and run.elapsed >= run.burst.at
        if burst_now:
            _enqueue_burst(run.burst, send_mail)  # before the rows due now: dee's code is one
        while waiting and waiting[0].at <= run.elapsed:
            row = waiting.pop(0)
            _enqueue(row, send_mail)
        if burst_now:
            early = run.smtp.first_received()
            run.burst.waiting_at_code = sum(r not in early for r in run.burst.readers)
        for row in run.rows:
            if row.mail_id and not row.settled:
                row.update(*read_state(app, row.mail_id))
        run.captured = run.smtp.received()
        run.burst.received = run.smtp.first_received()
        if view is not None:
            view(run)
        if not waiting and all(r.settled for r in run.rows) and run.burst.done:
            return
        if run.elapsed > limit:
            left = sum(not r.settled for r in run.rows)
            raise DemoError(f"{left} mails still unsettled after {limit:.0f} s")
        time.sleep(TICK)


def _enqueue_burst(burst: Burst, send_mail: Any) -> None:
    """Queue the newsletter: one notice per reader, all at once (kind priority 5)."""
    burst.enqueued_at = time.time()
    for n, address in enumerate(burst.readers, start=1):
        send_mail.apply_async(
            args=[address],
            kwargs={
                "subject": f"Newsletter, reader {n}",
                "body": "This month's news.",
                "kind": "notice",
            },
        )


def _enqueue(row: Row, send_mail: Any) -> None:
    planned = row.planned
    row.mail_id = str(uuid.uuid4())
    kwargs = {
        "subject": planned.subject,
        "body": planned.body,
        "kind": planned.kind,
        "context": dict(planned.context) if planned.context else None,
    }
    row.enqueued_at = time.time()
    row.state = "queued"  # before publishing: the poller may see the outcome at once
    send_mail.apply_async(args=[row.address], kwargs=kwargs, task_id=row.mail_id)


def _check_redis(url: str) -> None:
    import redis  # noqa: PLC0415

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
    except ValueError as exc:
        raise ValueError(f"--redis {mask_url(url)}: {exc}") from None
    try:
        client.ping()
    except redis.RedisError as exc:
        raise DemoError(f"cannot reach Redis at {mask_url(url)}: {exc}") from None
    finally:
        client.close()


def _delete_queue(url: str, queue: str) -> None:
    """Remove the run's own queue, its kombu bindings and its outbox from Redis (best effort).

    A mail still waiting at Ctrl-C is put back on the queue when the worker stops: deleting the
    queue keeps it from lingering there with nobody to take it, and its outbox entry with it.
    """
    import redis  # noqa: PLC0415

    with contextlib.suppress(redis.RedisError):
        client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
        try:
            keys = [*client.scan_iter(match=f"{queue}*", count=1000)]  # with priority steps
            keys += client.scan_iter(match=f"mailguard:{{outbox:{queue}}}*", count=1000)
            keys += [f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}"]
            client.delete(*keys)
        finally:
            client.close()


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Keep library loggers at WARNING while the demo runs (the live table owns the screen)."""
    names = {
        "mailer": logging.WARNING,
        "workers": logging.WARNING,
        "mailguard": logging.WARNING,  # the guard's own lines, at INFO in a worker by default
        "celery": logging.WARNING,
        "kombu": logging.WARNING,
        "kombu.connection": logging.ERROR,  # "no hostname supplied" for memory://
        "mail.log": logging.WARNING,  # aiosmtpd: peers and envelopes at INFO
    }
    levels = {name: logging.getLogger(name).level for name in names}
    for name, level in names.items():
        logging.getLogger(name).setLevel(level)
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
