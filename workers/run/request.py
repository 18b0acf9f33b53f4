"""The worker's receipt check: a message is bounded, and recognised as poison, before the pool.

A producer other than ``send_mail.delay`` (another client, an older version, a hand-written
message) can still put arguments on the queue that a worker would choke on: a prefork worker's
main process pickles them for its pool, and a context nested 500 deep kills it. And a message
that kills whatever worker takes it comes back (late acks) and kills the next one.

:class:`GuardedRequest` runs in the worker's main process, right before a request is handed to
the pool:

1. :func:`workers.run.call.check_call` bounds the raw arguments: a bad message ends at once as
   ``dropped`` / ``invalid`` (state SUCCESS, like every dropped mail), acknowledged, never seen
   by a pool process. Addresses are bounded, not parsed: the guard parses each once in the
   pool and records a bad one ``dropped`` / ``invalid`` (two parses per mail in all, the
   other at ``send_mail.delay``).
2. A *redelivered* copy is counted in the ledger (:meth:`mailer.records.ledger.Ledger.handoff`; a
   first delivery costs nothing): once ``MAILGUARD_POISON_AFTER`` copies were handed over without
   any run of the mail ending, the message is quarantined: outcome ``dropped`` / ``poison``
   recorded as final, kept in the dead-letter list (``mailguard status --dead-letters``), and
   acknowledged, so the worker carries on with the rest.
3. Its ``eta`` (every ``eta`` mailguard publishes is on the limiter's clock) is read on the
   limiter's clock: shifted by this process's offset from it
   (:func:`workers.run.state.clock_offset`, refreshed every :data:`OFFSET_TTL` seconds), so a worker
   whose clock is off runs a booked mail at its slot, neither early nor late.
4. A mail deferred before (its message carries ``_progress``) has its start told to the
   schedule (:func:`workers.waiting.parking.running`): its watch, if any, is not due for a claim
   lease, so the watchdog does not publish a mail whose run is starting or long (one round trip,
   here in the main process at the hand-off, so a busy pool does not delay it).

Earlier still, when the request is made on the message's arrival (an ``eta`` one too, long
before it runs), a mail's first message clears its outbox entry
(:func:`workers.outbox.entries.received`: one script call on the ledger's Redis): kombu recorded the
message as unacknowledged before this consumer saw it, so from here the broker's own redelivery
covers it.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Any

from celery.worker.request import Request
from celery.worker.state import task_ready

from mailer import outcomes as why
from mailer.errors import BackendUnavailable
from mailer.mail import InvalidArguments
from mailer.metrics import UNKNOWN_KIND, default_metrics
from mailer.outcomes import Outcome
from workers.outbox import entries as outbox
from workers.process import settings as process_settings
from workers.run import state
from workers.run.call import check_call
from workers.run.deferring import Deferred
from workers.waiting import parking

log = logging.getLogger("mailguard")

#: How long the main process trusts its offset from the limiter's clock, in seconds.
OFFSET_TTL = 10.0
#: An offset smaller than this (seconds) is left alone: noise, not skew.
OFFSET_NOISE = 0.05
_offset = [0.0, -OFFSET_TTL]  # the offset and the monotonic time it was read

#: How the main process sees a parked run's return value (the repr of its ``deferred`` outcome).
PARKED_REPR = "{'status': 'deferred'"


class GuardedRequest(Request):
    """A ``send_mail`` request checked in the main process before the pool sees it.

    The check sits in :meth:`revoked`, which the worker asks right before it hands a request to
    the pool (``execute_using_pool`` itself is replaced by Celery's own fast subclass): a request
    that ends here answers "revoked", Celery's path for a request that never reaches the pool.
    """

    _mailguard_ended = False
    _mailguard_checked = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            outbox.received(process_settings.current(), self.id, self.kwargs, self.delivery_info)
        except Exception:  # the consumer must live: the entry stays, its copy ends a repeat
            log.exception("mail %s: outbox entry not cleared on receipt", self.id)

    @property
    def eta(self) -> datetime | None:
        """The message's ``eta`` (the limiter's clock) on this process's clock."""
        eta: datetime | None = getattr(self, "_eta", None)
        if eta is None:
            return None
        shift = _clock_offset()
        return eta if abs(shift) < OFFSET_NOISE else eta - timedelta(seconds=shift)

    def revoked(self) -> bool:
        if super().revoked() or self._mailguard_ended:
            return True
        if self._mailguard_checked:
            return False
        self._mailguard_checked = True
        outcome = self._receipt_outcome()
        if outcome is None:
            return False
        self._mailguard_ended = True
        self._end(outcome)
        return True

    def on_failure(
        self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False
    ) -> None:
        """A run that ended :class:`workers.tasks.Deferred` is announced as ``task-retried``
        (Flower and ``celery events`` show RETRY, not STARTED); then Celery's own handling."""
        exc = getattr(exc_info, "exception", None)
        exc = getattr(exc, "exc", exc)  # the pool wraps it in ExceptionWithTraceback
        if isinstance(exc, Deferred):
            self.send_event("task-retried", exception=str(exc), traceback="")
        super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)

    def send_event(self, type: str, **fields: Any) -> None:
        """A parked run (it returns its ``deferred`` outcome, its result not stored: see
        :func:`workers.tasks.send_mail`) is announced as ``task-retried``, as a deferred one."""
        result = fields.get("result")
        if type == "task-succeeded" and str(result).startswith(PARKED_REPR):
            type, fields = "task-retried", {"exception": f"parked: {result}", "traceback": ""}
        super().send_event(type, **fields)

    def _receipt_outcome(self) -> Outcome | None:
        """The outcome that ends this request on receipt, or None to hand it to the pool."""
        try:
            call = check_call(self.args, self.kwargs, addresses=False)  # parsed in the pool
        except InvalidArguments as exc:
            return _outcome(self.id, {}, why.INVALID, str(exc))
        mail_id = call.get("mail_id") or self.id
        if call.get("_progress"):
            parking.running(process_settings.current(), str(mail_id))
        if not self.delivery_info.get("redelivered"):
            return None
        ledger = state.guard().ledger
        try:
            count = ledger.handoff(mail_id)
            if count <= process_settings.current().poison_after:
                return None
            poison = _outcome(
                mail_id,
                call,
                why.POISON,
                f"handed to a worker {count} times without any run ending (a message that "
                "ends its worker?); quarantined",
            )
            ledger.quarantine(poison)
        except BackendUnavailable as exc:
            log.warning("mail %s: redelivery not counted: %s", mail_id, exc)
            return None
        return poison

    def _end(self, outcome: Outcome) -> None:
        """Store ``outcome`` as this task's result, count it, and acknowledge the message."""
        try:
            self.task.backend.mark_as_done(self.id, outcome.as_dict(), request=self)
            default_metrics().record(outcome, UNKNOWN_KIND)
        finally:
            task_ready(self)
            self.acknowledge()
        log.warning(
            "mail %s dropped on receipt (%s): %s",
            outcome.mail_id,
            outcome.reason,
            outcome.detail,
            extra={"mail_id": outcome.mail_id, "status": "dropped", "reason": outcome.reason},
        )


def _clock_offset() -> float:
    """This process's offset from the limiter's clock (seconds), read at most every
    :data:`OFFSET_TTL` seconds."""
    now = time.monotonic()
    if now - _offset[1] >= OFFSET_TTL:
        _offset[:] = [state.clock_offset(), now]
    return _offset[0]


def _outcome(mail_id: str, call: dict[str, Any], reason: str, detail: str) -> Outcome:
    kind = call.get("kind", "default")
    return Outcome(
        status="dropped",
        mail_id=mail_id,
        kind=kind if isinstance(kind, str) else "?",
        reason=reason,
        detail=detail,
    )
