"""``send_mail``: the Celery task that runs a mail through the guard (a deferral is carried out by
:mod:`workers.run.deferring`), and :func:`cancel` in Python.

>>> send_mail.delay("ada@example.com", subject="Your code", body="493 112")   # doctest: +SKIP
>>> send_mail.delay("ada@example.com", kind="code", context={"code": "493112"})  # doctest: +SKIP

The process's settings live in :mod:`workers.process.settings`, its guard in
:mod:`workers.run.state`; ``workers.tasks.settings``, ``guard`` and ``use_settings`` are theirs,
re-exported. The call checks are :mod:`workers.run.call`'s.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from celery import Task, shared_task, signals
from celery.utils import uuid
from celery.utils.time import maybe_make_aware

from mailer.crashpoints import crash_point
from mailer.guard import MailRequest, iso
from mailer.mail import unseal
from mailer.outcomes import SUPERSEDED, Outcome
from mailer.settings import Settings
from mailer.steps import DEFERRED, Fail, Finish, Later, Progress, Step
from workers import app as _app  # makes mailguard's app this process's default
from workers.brokers import priority, routing
from workers.outbox import entries as outbox
from workers.outbox import ride as outbox_ride
from workers.process import settings as process_settings
from workers.process.settings import use_settings
from workers.run import state
from workers.run.call import PRIVATE, check_call, check_consumed, worker_started, worker_stopped
from workers.run.corecipients import run
from workers.run.deferring import Deferred, carry_out
from workers.run.enqueue import bounded
from workers.run.stamps import arrived, stamped
from workers.run.state import guard
from workers.waiting import failed, parking
from workers.waiting.cancelling import NotCancelled, cancel_waiting, lookup
from workers.waiting.outcomes import store_waiting

__all__ = [
    "PRIVATE",
    "Deferred",
    "GuardedTask",
    "MailFailed",
    "NotCancelled",
    "cancel",
    "check_call",
    "guard",
    "send_mail",
    "use_settings",
]

log = logging.getLogger("mailguard")


def __getattr__(name: str) -> Settings:
    """``workers.tasks.settings``: the settings in force
    (:func:`workers.process.settings.current`)."""
    if name == "settings":
        return process_settings.current()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class MailFailed(Exception):
    """The mail failed for good; ``args[0]`` is the outcome dict (status ``failed``)."""


class GuardedTask(Task[Any, Any]):
    """Bounds its arguments at enqueue and on receipt; publishes each mail at its kind's
    priority (:mod:`workers.brokers.priority`); keeps addresses out of the broker's and the worker's
    logs (``argsrepr``/``kwargsrepr``)."""

    Request = "workers.run.request:GuardedRequest"

    def apply_async(  # type: ignore[override] # options pass through to Celery unchanged
        self, args: Any = None, kwargs: Any = None, **options: Any
    ) -> Any:
        call = check_call(args, kwargs)
        check_consumed(self.app.conf.broker_url, _broker_setting(self.app))
        kwargs = stamped(call, kwargs)  # _requested_at and _order, unless the call has them
        if "queue" not in options:  # MAILGUARD_QUEUE, unless the app's task_routes route it
            options.update(
                routing.queue_option(self.app, self.name, process_settings.current().queue)
            )
        if "priority" not in options:
            options["priority"] = priority.publish_priority(
                self.app.conf.broker_url,
                process_settings.current().kinds,
                call.get("kind", "default"),
            )
        options.setdefault("argsrepr", "(<redacted>)")
        options.setdefault("kwargsrepr", "{<redacted>}")
        if "_progress" not in call:  # a caller's call, not a deferred run published again
            parked = self._park_far_eta(args, kwargs, options)
            if parked is not None:
                return parked
            return self._publish_first(args, kwargs, options)
        return super().apply_async(args, kwargs, **options)

    def _publish_first(self, args: Any, kwargs: dict[str, Any], options: dict[str, Any]) -> Any:
        """Publish a caller's call, its outbox entry written first (:mod:`workers.outbox.entries`:
        one script call on the ledger's Redis, in the same write as the publish when the broker is
        that Redis server, else its answer read later; the mail is published without one when
        that Redis is down). A publish that raises removes the entry (NotEnqueued: bounded)."""
        recorded = None
        if self._to_mail_queue(options):
            task_id = options["task_id"] = str(options.get("task_id") or uuid())
            not_before = _not_before(self.app, options)
            if not_before is not None and options.get("countdown") is not None:
                # One eta for the message and its entry: a copy is never due earlier.
                del options["countdown"]
                options["eta"] = datetime.fromtimestamp(not_before, timezone.utc)
            recorded = outbox.record(
                process_settings.current(),
                task_id=task_id,
                args=args,
                kwargs=dict(kwargs or {}),
                priority=options.get("priority"),
                not_before=not_before,
                app=self.app,
            )
        try:
            with bounded(self.app, options), outbox_ride.riding(getattr(recorded, "ride", None)):
                result = super().apply_async(args, kwargs, **options)
        except BaseException:
            outbox.discard(recorded)
            raise
        outbox.published(recorded)
        return result

    def _to_mail_queue(self, options: dict[str, Any]) -> bool:
        """Whether this call goes to ``MAILGUARD_QUEUE``, the queue whose schedule and outbox
        this process's settings name (not when the project's ``task_routes`` route it)."""
        settings = process_settings.current()
        queue = options.get("queue") or routing.mail_queue(self.app, settings.queue)
        if queue != settings.queue:
            return False
        return bool(self.app.conf.get(routing.MARK)) or "queue" in options

    def _park_far_eta(self, args: Any, kwargs: dict[str, Any], options: dict[str, Any]) -> Any:
        """A caller's ``eta`` / ``countdown`` farther than ``MAILGUARD_PARK_AFTER``: the call
        is parked in the schedule (no worker holds it; the promoter publishes it when due) and
        its result answered, state DEFERRED; None to publish it as Celery does (a short wait,
        no wait, parking unavailable, or ``send_mail``'s queue routed elsewhere)."""
        not_before = _not_before(self.app, options)
        settings = process_settings.current()
        if not_before is None or not self._to_mail_queue(options):
            return None  # no eta, or the project's task_routes route send_mail elsewhere
        task_id = str(options.get("task_id") or uuid())
        broker = str(self.app.conf.broker_url)
        call = dict(kwargs or {})
        parked = parking.park_call(
            settings, broker_url=broker, task_id=task_id, args=args, kwargs=call, due=not_before
        )
        if not parked:
            return None
        _show_parked(self, task_id, call, not_before)
        return self.AsyncResult(task_id)


def _not_before(app: Any, options: dict[str, Any]) -> float | None:
    """A caller's ``countdown`` (seconds) or ``eta`` (a datetime; naive ones in the app's time
    zone, as Celery reads them) as epoch seconds on this process's clock; None without one,
    or with one Celery will refuse itself."""
    countdown, eta = options.get("countdown"), options.get("eta")
    try:
        if countdown is not None:
            return time.time() + float(countdown)
        if isinstance(eta, datetime):
            return float(maybe_make_aware(eta, app.timezone).timestamp())
    except (TypeError, ValueError, OverflowError):
        return None
    return None


def _show_parked(task: Task[Any, Any], task_id: str, kwargs: dict[str, Any], due: float) -> None:
    """Store the DEFERRED state of a call parked at enqueue, its outcome compact (a backend
    that is down is logged: the mail is parked all the same)."""
    mail_id = str(kwargs.get("mail_id") or task_id)
    kind = kwargs.get("kind", "default")
    outcome = Outcome(
        status="deferred",
        mail_id=mail_id,
        kind=kind if isinstance(kind, str) else "default",
        due=due,
        decided_at=time.time(),
        detail=f"parked until {iso(due)}: the caller's eta",
    )
    try:
        store_waiting(task.backend, task_id, outcome)
    except Exception as exc:  # whatever the backend raises, the mail is parked
        log.warning("mail %s: %s state not stored (result backend: %s)", mail_id, DEFERRED, exc)


def _broker_setting(app: Any) -> str:
    """What names ``app``'s broker in a refusal: mailguard's variable or the app's broker_url."""
    if app is _app.app:
        return "MAILGUARD_BROKER_URL"
    return f"the broker_url of Celery app {app.main!r}"


signals.after_task_publish.connect(lambda **_: crash_point("published"), weak=False)


@signals.worker_init.connect
def _worker_started(sender: Any = None, **_: Any) -> None:
    """A worker of this process consumes its ``memory://`` broker (:func:`check_consumed`)."""
    worker_started(sender)


@signals.worker_shutdown.connect
def _worker_stopped(sender: Any = None, **_: Any) -> None:
    worker_stopped(sender)


def _count_queue_wait(eta: Any, requested_at: float, kind: Any) -> None:
    """Count how long this run waited in the queue after its mail could run: since its
    countdown's end (``eta``, ISO 8601) or, on a first run, since ``send_mail.delay``."""
    try:
        ready = datetime.fromisoformat(eta).timestamp() if eta else requested_at
    except (TypeError, ValueError):
        return
    if ready:
        level = priority.kind_priority(process_settings.current().kinds, kind)
        guard().metrics.queue_wait(level, time.time() - ready)


@shared_task(
    bind=True,
    base=GuardedTask,
    name=state.SEND_MAIL,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,  # deferrals are unlimited; the guard counts SMTP retries itself
    throws=(MailFailed,),
)
def send_mail(
    self: Task[Any, Any],
    to: str | list[str],
    subject: str | None = None,
    body: str | None = None,
    *,
    html: str | None = None,
    kind: str = "default",
    context: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    mail_id: str | None = None,
    tenant: str | None = None,
    cc: str | list[str] | None = None,
    bcc: str | list[str] | None = None,
    reply_to: str | list[str] | None = None,
    from_email: str | None = None,
    attachments: list[list[Any]] | None = None,
    charset: str | None = None,
    mime: str | None = None,
    _progress: str | dict[str, int] | None = None,
    _requested_at: float | None = None,
    _order: int | None = None,
) -> dict[str, Any]:
    """Send one mail to ``to``, or defer it to its booked slot, or drop it; exactly once.

    ``to`` is an address or a list; ``cc``, ``bcc`` and ``reply_to`` likewise; ``from_email``
    replaces ``MAILGUARD_SENDER``; ``attachments`` are ``[filename, base64 content,
    mimetype]`` items (a fourth, ``{"charset", "inline", "content_id"}``, optional); ``charset``
    the body's (``utf-8`` by default); ``mime`` a whole message instead (base64; see
    :mod:`mailer.mail.carried`: Django's backend carries its messages so). Every envelope
    recipient (to, cc, bcc) must have room: the message goes at the earliest slot that suits
    all of them, counted once in each one's budget.
    ``subject``/``body`` left out are rendered from ``kind``'s templates with ``context``.
    ``mail_id`` defaults to this task's id and stays the same over every deferral. Returns the
    outcome dict (status ``sent`` or ``dropped``); a failed mail raises :class:`MailFailed`.
    While deferred, ``AsyncResult(id).state`` is :data:`~mailer.steps.DEFERRED` with the
    outcome, compact, as ``info`` (reason, tier, wait, due...; whole through
    :func:`workers.waiting.outcomes.read_state`); a parked run returns that ``deferred`` outcome,
    not stored: the state stays DEFERRED.
    """
    settings = process_settings.current()
    mail_id = mail_id or str(self.request.id)
    request = MailRequest(
        to=to,
        mail_id=mail_id,
        subject=subject,
        body=body,
        html=html,
        kind=kind,
        context=context,
        headers=headers,
        tenant=tenant,
        cc=cc,
        bcc=bcc,
        reply_to=reply_to,
        from_email=from_email,
        attachments=attachments,
        charset=charset,
        mime=mime,
    )
    # a str: sealed by this version; a dict: a mail 0.1.0 deferred (run.call.shipped_progress)
    sealed = _progress if isinstance(_progress, str) else None
    progress = (unseal(sealed, mail_id, settings.secret) if sealed else None) or Progress()
    if (self.request.delivery_info or {}).get("redelivered"):  # a copy: see Progress.redelivered
        progress = replace(progress, redelivered=True)
    progress = arrived(progress, _requested_at, _order)  # the caller's stamps (workers.run.stamps)
    _count_queue_wait(self.request.eta, progress.requested_at, kind)
    step = _process(request, progress, settings, watched=bool(_progress))
    crash_point("recorded")
    if isinstance(step, Finish):
        if step.outcome.reason == SUPERSEDED:  # a stale copy: the mail's state is another run's
            self.request.ignore_result = True
        return step.outcome.as_dict()
    if isinstance(step, Fail):  # kept for `mailguard retry` (workers/waiting/failed.py)
        failed.keep(settings, self.request, mail_id)
        raise MailFailed(step.outcome.as_dict())
    return carry_out(self, step, mail_id, settings)


def _process(
    request: MailRequest, progress: Progress, settings: Settings, *, watched: bool
) -> Step:
    """One run through the guard. A run that finishes (sent, dropped, failed, or a repeat of
    a finished mail) of a mail deferred before (``watched``: it may have an entry in the
    schedule) removes that entry, so the watchdog never publishes it. (The run's start was
    told to the schedule at the hand-off to the pool: :mod:`workers.run.request`.)"""
    step = run(send_mail, request, progress)  # and the copies for co-recipients refused a time
    if step.outcome.reason == SUPERSEDED:  # the entry is the run's that carries the mail on
        return step
    if not isinstance(step, Later) and (watched or step.outcome.deferrals):
        parking.settled(settings, request.mail_id)
    return step


def cancel(mail_id_or_task_id: str, *, app: Any = None) -> Outcome:
    """Cancel a waiting mail (parked, or deferred to a booked slot), as ``mailguard cancel``
    does: it ends ``dropped`` / ``cancelled`` (its result and the ledger say so) and a parked
    mail's recipients get their slots back at once (a countdown mail gives them back when its
    run finds it cancelled). Takes the task id ``send_mail.delay`` returned or the mail's own
    ``mail_id``; returns the ``cancelled`` outcome. ``app`` is the Celery app whose result
    backend keeps the mail's state (default: the one ``send_mail`` runs on).

    Raises :class:`NotCancelled` (one line: not waiting, already sent, being sent right now)
    and :class:`~mailer.errors.BackendUnavailable`. Uses this process's stores: the workers'
    shared ``redis://`` ledger, or an in-process worker's own (memory) ones; from a process
    that shares neither, nothing is found.
    """
    settings = process_settings.current()
    stores = guard()
    schedule = parking.schedule_for(settings)
    app = app if app is not None else send_mail.app
    found = lookup(app, str(mail_id_or_task_id), stores.ledger, schedule)
    return cancel_waiting(app, settings, found, (stores.ledger, schedule), stores.limiter)
