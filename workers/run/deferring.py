"""Carrying out a deferral: a run's :class:`~mailer.steps.Later` becomes a stored DEFERRED
state and either a parked entry (the promoter publishes it when due) or the next run published
with its countdown (:class:`Deferred`), never a lost mail when the broker refuses it.

Called by :func:`workers.tasks.send_mail` only; the waits' bounds are the settings'
(``MAILGUARD_PARK_AFTER``, ``MAILGUARD_MAX_COUNTDOWN``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from celery import Task
from celery.exceptions import Ignore, Reject

from mailer.crashpoints import crash_point
from mailer.mail import seal
from mailer.outcomes import IN_FLIGHT
from mailer.settings import Settings
from mailer.steps import DEFERRED, Later
from workers.brokers import priority
from workers.process import settings as process_settings
from workers.run import state
from workers.waiting import parking
from workers.waiting.outcomes import store_waiting

log = logging.getLogger("mailguard")


class Deferred(Ignore):
    """This run ended deferred; its next run is published. ``args[0]`` says until when and why.
    (A *parked* run does not raise it: it returns its ``deferred`` outcome with the request's
    ``ignore_result`` set, see :func:`send_mail`.)

    Celery treats it as :class:`~celery.exceptions.Ignore` (the result keeps the
    :data:`~mailer.steps.DEFERRED` state the task stored); the worker's main process sends a
    ``task-retried`` event for it (:class:`workers.run.request.GuardedRequest`), so Flower and
    ``celery events`` show RETRY.
    """


def carry_out(
    task: Task[Any, Any], step: Later, mail_id: str, settings: Settings
) -> dict[str, Any]:
    """Carry out a ``Later`` (the one place that does): store the deferred state, then park
    the next run (return the ``deferred`` outcome) or publish it with its countdown (raise
    :class:`Deferred`). A copy that found another run sending its mail (``in_flight``) stores
    no state: that run's outcome, stored under the same task id, must not be overwritten by a
    stale DEFERRED."""
    crash_point("booked")
    if step.outcome.reason != IN_FLIGHT:
        _show_deferred(task, step, mail_id)
    again = dict(task.request.kwargs or {})
    again.update(mail_id=mail_id, _progress=seal(step.progress, mail_id, settings.secret))
    why = step.outcome.reason or "deferred"
    if step.outcome.tier:
        why += f" by {step.outcome.tier}"
    task_id = str(task.request.id)
    if parking.park(settings, step, task_id=task_id, args=task.request.args, kwargs=again):
        # Parked: a promoter publishes it again when due (workers/polling/promoter.py). The run
        # returns rather than raise Deferred: Celery stores nothing more (the DEFERRED state stays)
        # and skips an ignored run's cost (two tracebacks of its own tracer, about 1.5 ms, and a
        # 43 KB pickle back to the main process). The main process still announces
        # ``task-retried`` (workers/run/request.py); the worker log says "succeeded: {'status':
        # 'deferred', ...}".
        task.request.ignore_result = True
        return step.outcome.as_dict()
    # The one cap of a countdown: a longer wait is parked (above) or hops (the run wakes early,
    # finds its booking and defers again). Celery's names (countdown, eta) start here.
    countdown = min(step.wait, settings.longest_countdown)
    if step.due is not None:  # the limiter's clock, not this worker's (mailer.steps.Later)
        eta = datetime.fromtimestamp(step.due - (step.wait - countdown), timezone.utc)
    else:
        eta = datetime.fromtimestamp(state.limiter_now() + countdown, timezone.utc)
    # The payload beside the booking first, then the countdown: whatever dies after this
    # (this worker, the broker, the message), the watchdog publishes the mail again. Not for
    # a copy that found another run sending the mail: the entry is that run's (its turn).
    args = task.request.args
    watched = step.outcome.reason != IN_FLIGHT and parking.watch(
        settings, step, task_id=task_id, args=args, kwargs=again, due=eta.timestamp()
    )
    kind = again.get("kind", "default")  # one step above it: its burst cannot make it late
    next_priority = priority.publish_priority(
        task.app.conf.broker_url, process_settings.current().kinds, kind, booked=True
    )
    try:
        task.retry(eta=eta, kwargs=again, throw=False, priority=next_priority)
    except Reject as exc:
        return _unpublished(task, step, again, exc, watched=watched)
    raise Deferred(f"deferred until {eta.isoformat(timespec='milliseconds')}: {why}")


def _show_deferred(task: Task[Any, Any], step: Later, mail_id: str) -> None:
    """Store the :data:`~mailer.steps.DEFERRED` state, its outcome compact
    (:func:`~workers.waiting.outcomes.store_waiting`). The state is a view: a result backend
    that is down (any error of any backend) is logged and the mail still waits, rather than the
    run failing and its message being acknowledged with the mail never sent."""
    try:
        store_waiting(task.backend, str(task.request.id), step.outcome)
    except Exception as exc:  # whatever the backend raises, the mail must still wait
        log.warning("mail %s: %s state not stored (result backend: %s)", mail_id, DEFERRED, exc)


def _unpublished(
    task: Task[Any, Any], step: Later, again: dict[str, Any], exc: Reject, *, watched: bool
) -> dict[str, Any]:
    """The next run could not be published (the broker is down or refused it): Celery's
    ``retry`` then rejects this message *without* requeueing it, which would lose the mail.
    Park it instead, whatever its wait (the promoter publishes it once the broker takes it);
    with parking off, its watch keeps it (the watchdog publishes it once the broker takes it)
    and this message is acknowledged, the consumer carrying on. Without a schedule, reject it
    *with* requeue so that the broker delivers it again."""
    mail_id = str(again["mail_id"])
    task_id = str(task.request.id)
    args = task.request.args
    settings = process_settings.current()
    if parking.park(settings, step, task_id=task_id, args=args, kwargs=again, always=True):
        log.warning("mail %s: its next run could not be published (%s); parked", mail_id, exc)
        task.request.ignore_result = True
        return step.outcome.as_dict()
    if watched:
        log.warning(
            "mail %s: its next run could not be published (%s); kept for the watchdog",
            mail_id,
            exc,
            extra={"mail_id": mail_id},
        )
        task.request.ignore_result = True
        return step.outcome.as_dict()
    log.warning("mail %s: its next run could not be published (%s); requeued", mail_id, exc)
    raise Reject(exc.args[0] if exc.args else None, requeue=True) from None
