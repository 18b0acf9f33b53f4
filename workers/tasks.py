"""``send_mail``: the Celery task that carries out the guard's steps. The only Celery-aware code.

>>> send_mail.delay("ada@example.com", subject="Your code", body="493 112")   # doctest: +SKIP
>>> send_mail.delay("ada@example.com", kind="code", context={"code": "493112"})  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

from celery import Task, shared_task
from celery.exceptions import Ignore, Reject
from kombu.utils.json import dumps, loads

from mailer.factory import build_guard
from mailer.guard import Guard, MailRequest
from mailer.mail.arguments import InvalidArguments, check_arguments
from mailer.mail.seal import seal, unseal
from mailer.settings import Settings
from mailer.steps import Fail, Finish, Later, Progress
from workers import app as app_module
from workers import parking, priority
from workers.app import settings as _env_settings

log = logging.getLogger("mailguard")

#: The settings this process's guard is built from (the environment's, or :func:`use_settings`).
settings: Settings = _env_settings


class MailFailed(Exception):
    """The mail failed for good; ``args[0]`` is the outcome dict (status ``failed``)."""


class Deferred(Ignore):
    """This run ended deferred; its next run is published. ``args[0]`` says until when and why.
    (A *parked* run does not raise it: it returns its ``deferred`` outcome with the request's
    ``ignore_result`` set, see :func:`send_mail`.)

    Celery treats it as :class:`~celery.exceptions.Ignore` (the result keeps the ``DEFERRED``
    state the task stored); the worker's main process sends a ``task-retried`` event for it
    (:class:`workers.request.GuardedRequest`), so Flower and ``celery events`` show RETRY.
    """


_guard: Guard | None = None
_guard_pid = 0
_guard_lock = threading.Lock()


def guard() -> Guard:
    """This process's guard, built on first use (after the prefork pool forked)."""
    global _guard, _guard_pid
    with _guard_lock:
        if _guard is None or _guard_pid != os.getpid():
            _guard, _guard_pid = build_guard(settings), os.getpid()
        return _guard


def use_settings(new: Settings) -> Settings:
    """Build this process's guard from ``new`` from now on; return the settings it replaces.

    For a process that runs its own in-process worker on settings of its own rather than the
    environment's (``mailguard demo``). Only the guard changes: the cached guard is dropped and
    the next run builds one from ``new``. ``workers.app.settings`` stays what the environment
    says, and the Celery app keeps its configuration: a caller that also needs another broker or
    result backend configures ``workers.app.app.conf`` itself before starting its worker (see
    :func:`workers.demo.configure`). Call it before the worker starts, not while mails run.
    """
    global settings, _guard
    with _guard_lock:
        old, settings, _guard = settings, new, None
    return old


#: Keyword arguments only mailguard itself passes: ``_progress`` (sealed: see
#: :mod:`mailer.mail.seal`) and ``_requested_at``, the epoch seconds of ``send_mail.delay`` (a
#: kind's ``max_wait`` counts from it; the guard never lets it be later than the mail's first run,
#: so a forged value can only shorten the mail's own deadline).
PRIVATE = ("_progress", "_requested_at")


def check_call(args: Any, kwargs: Any) -> dict[str, Any]:
    """``send_mail``'s call as keywords, or ``InvalidArguments`` (one line) saying what is wrong.

    Run at enqueue (:meth:`GuardedTask.apply_async`) and again on receipt, before the pool
    (:class:`workers.request.GuardedRequest`): bounds from :mod:`mailer.mail.arguments`, a
    ``_progress`` that mailguard sealed for this mail id, and nothing a worker could not decode.
    """
    if app_module.settings_error and settings is _env_settings:
        raise ValueError(f"mailguard: {app_module.settings_error}")
    call = check_arguments(
        args, kwargs, max_message_bytes=settings.max_message_bytes, private=PRIVATE
    )
    if "_progress" in call:
        mail_id = call.get("mail_id")
        if (
            not isinstance(mail_id, str)
            or unseal(call["_progress"], mail_id, settings.secret) is None
        ):
            raise InvalidArguments("send_mail: _progress is private to mailguard")
    requested = call.get("_requested_at")
    if requested is not None and (
        isinstance(requested, bool)
        or not isinstance(requested, (int, float))
        or not 0 <= requested < 1e11
    ):
        raise InvalidArguments("send_mail: _requested_at is private to mailguard")
    _check_transportable(args, kwargs)
    return call


class GuardedTask(Task[Any, Any]):
    """Bounds its arguments at enqueue and on receipt; publishes each mail at its kind's
    priority (:mod:`workers.priority`); keeps addresses out of the broker's and the worker's
    logs (``argsrepr``/``kwargsrepr``)."""

    Request = "workers.request:GuardedRequest"

    def apply_async(  # type: ignore[override] # options pass through to Celery unchanged
        self, args: Any = None, kwargs: Any = None, **options: Any
    ) -> Any:
        call = check_call(args, kwargs)
        if "_requested_at" not in call:
            kwargs = {**(kwargs or {}), "_requested_at": round(time.time(), 3)}
        if "priority" not in options:
            level = priority.kind_priority(settings.kinds, call.get("kind", "default"))
            options["priority"] = priority.message_priority(self.app.conf.broker_url, level)
        options.setdefault("argsrepr", "(<redacted>)")
        options.setdefault("kwargsrepr", "{<redacted>}")
        return super().apply_async(args, kwargs, **options)


def _count_queue_wait(eta: Any, requested_at: float, kind: Any) -> None:
    """Count how long this run waited in the queue after its mail could run: since its
    countdown's end (``eta``, ISO 8601) or, on a first run, since ``send_mail.delay``."""
    try:
        ready = datetime.fromisoformat(eta).timestamp() if eta else requested_at
    except (TypeError, ValueError):
        return
    if ready:
        level = priority.kind_priority(settings.kinds, kind)
        guard().metrics.queue_wait(level, time.time() - ready)


def _check_transportable(args: Any, kwargs: Any) -> None:
    """Refuse at enqueue what a worker could not decode (it would stay PENDING forever).

    kombu's JSON reads ``{"__type__": ..., "__value__": ...}`` as a typed value; a caller's
    context shaped like that encodes fine but fails to decode on the worker.
    """
    try:
        loads(dumps([args, kwargs]))
    except (TypeError, ValueError) as exc:
        raise InvalidArguments(
            f"send_mail arguments cannot travel as JSON: {type(exc).__name__}; use plain "
            "str/int/float/bool/None, lists and dicts with str keys"
        ) from None


@shared_task(
    bind=True,
    base=GuardedTask,
    name="mailguard.send_mail",
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
    attachments: list[list[str]] | None = None,
    _progress: str | None = None,
    _requested_at: float | None = None,
) -> dict[str, Any]:
    """Send one mail to ``to``, or defer it to its booked slot, or drop it; exactly once.

    ``to`` is an address or a list; ``cc``, ``bcc`` and ``reply_to`` likewise; ``from_email``
    replaces ``MAILGUARD_SENDER``; ``attachments`` are ``[filename, base64 content,
    mimetype]`` items. Every envelope recipient (to, cc, bcc) must have room: the message goes
    at the earliest slot that suits all of them, counted once in each one's budget.
    ``subject``/``body`` left out are rendered from ``kind``'s templates with ``context``.
    ``mail_id`` defaults to this task's id and stays the same over every deferral. Returns the
    outcome dict (status ``sent`` or ``dropped``); a failed mail raises :class:`MailFailed`.
    While deferred, ``AsyncResult(id).state == "DEFERRED"`` with the outcome as ``info`` (a
    parked run returns that ``deferred`` outcome, not stored: the state stays DEFERRED).
    """
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
    )
    progress = (unseal(_progress, mail_id, settings.secret) if _progress else None) or Progress()
    if not progress.requested_at and _requested_at:
        progress = replace(progress, requested_at=min(float(_requested_at), time.time()))
    _count_queue_wait(self.request.eta, progress.requested_at, kind)
    step = guard().process(request, progress)
    if isinstance(step, Finish):
        return step.outcome.as_dict()
    if isinstance(step, Fail):
        raise MailFailed(step.outcome.as_dict())
    assert isinstance(step, Later)
    _show_deferred(self, step, mail_id)
    again = dict(self.request.kwargs or {})
    again.update(mail_id=mail_id, _progress=seal(step.progress, mail_id, settings.secret))
    why = step.outcome.reason or "deferred"
    if step.outcome.tier:
        why += f" by {step.outcome.tier}"
    task_id = str(self.request.id)
    if parking.park(settings, step, task_id=task_id, args=self.request.args, kwargs=again):
        # Parked: a promoter publishes it again when due (workers/promoter.py). The run returns
        # rather than raise Deferred: Celery stores nothing more (the DEFERRED state stays) and
        # skips an ignored run's cost (two tracebacks of its own tracer, about 1.5 ms, and a
        # 43 KB pickle back to the main process). The main process still announces
        # ``task-retried`` (workers/request.py); the worker log says "succeeded: {'status':
        # 'deferred', ...}".
        self.request.ignore_result = True
        return step.outcome.as_dict()
    countdown = min(step.countdown, settings.longest_countdown)  # longer waits are parked
    try:
        if step.eta is not None:  # the limiter's clock, not this worker's (mailer.steps.Later)
            eta = datetime.fromtimestamp(step.eta - step.countdown + countdown, timezone.utc)
            self.retry(eta=eta, kwargs=again, throw=False)
        else:
            eta = datetime.now(timezone.utc) + timedelta(seconds=countdown)
            self.retry(countdown=countdown, kwargs=again, throw=False)
    except Reject as exc:
        return _unpublished(self, step, again, exc)
    raise Deferred(f"deferred until {eta.isoformat(timespec='milliseconds')}: {why}")


def _show_deferred(task: Task[Any, Any], step: Later, mail_id: str) -> None:
    """Store the ``DEFERRED`` state. The state is a view: a result backend that is down (any
    error of any backend) is logged and the mail still waits, rather than the run failing and
    its message being acknowledged with the mail never sent."""
    try:
        task.update_state(state="DEFERRED", meta=step.outcome.as_dict())
    except Exception as exc:  # whatever the backend raises, the mail must still wait
        log.warning("mail %s: DEFERRED state not stored (result backend: %s)", mail_id, exc)


def _unpublished(
    task: Task[Any, Any], step: Later, again: dict[str, Any], exc: Reject
) -> dict[str, Any]:
    """The next run could not be published (the broker is down or refused it): Celery's
    ``retry`` then rejects this message *without* requeueing it, which would lose the mail.
    Park it instead, whatever its wait (the promoter publishes it once the broker takes it);
    without a schedule, reject it *with* requeue so that the broker delivers it again."""
    mail_id = str(again["mail_id"])
    task_id = str(task.request.id)
    args = task.request.args
    if parking.park(settings, step, task_id=task_id, args=args, kwargs=again, always=True):
        log.warning("mail %s: its next run could not be published (%s); parked", mail_id, exc)
        task.request.ignore_result = True
        return step.outcome.as_dict()
    log.warning("mail %s: its next run could not be published (%s); requeued", mail_id, exc)
    raise Reject(exc.args[0] if exc.args else None, requeue=True) from None
