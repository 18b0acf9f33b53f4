"""Parking a deferred mail: its task message goes to the schedule (:mod:`mailer.records.schedule`).
A booked mail held as a countdown is *watched* there instead: the same payload, for the
watchdog (:mod:`workers.polling.promoter`) to publish again if no run of it is seen in time.

The payload is the message a promoter publishes again (:mod:`workers.waiting.payload`: a compact
JSON array of the due time, args, kwargs and the progress, about 150 B for a short mail): the
promoted run is the same mail, with the same deadline and the same booking, under the same task
id. Its kind's priority is set again when it is published (:mod:`workers.polling.promoter`).

One schedule per queue in the ledger's Redis (sharded over hash slots:
:mod:`mailer.records.schedule.redis`), whatever app a process runs and however its broker URL is
spelled: every worker, ``mailguard scheduled``, ``mailguard cancel`` and
:func:`workers.tasks.cancel` see the same parked mails. A promoter
publishes through its own worker's app, so the workers of one queue must consume from one
broker: a worker refuses to start beside a running one that does not
(:mod:`workers.process.liveness`, checked by :mod:`workers.app`). A memory schedule can only be
promoted by a promoter in the same process (:mod:`workers.polling.promoter`): without one, nothing
is parked.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from mailer.crashpoints import crash_point
from mailer.errors import BackendUnavailable
from mailer.guard import iso
from mailer.records.ledger import Ledger
from mailer.records.schedule import (
    Schedule,
    parked_until,
    schedule_from_url,
    stored,
)
from mailer.settings import Settings
from mailer.steps import Later, Progress
from workers.process.per_process import PerProcess
from workers.waiting.payload import Parked

log = logging.getLogger("mailguard")

#: This process's schedules by (ledger URL, queue).
_stores: PerProcess[tuple[str, str], Schedule] = PerProcess()
#: The ledger that drops a parked mail's claim, by the key of its schedule in :data:`_stores`.
_ledgers: PerProcess[tuple[str, str], Ledger] = PerProcess()
#: Whether this process runs the promoter (a memory schedule is parked into only there).
_promoter: PerProcess[str, bool] = PerProcess()


def promoter_runs_here(running: bool = True) -> None:
    """Say that this process's promoter started (or, ``running`` False, stopped)."""
    if running:
        _promoter.put("here", True)
    else:
        _promoter.discard("here")


def promoter_here() -> bool:
    """Whether this process runs the promoter (never true in a pool process it forked)."""
    return bool(_promoter.get("here"))


def schedule_for(settings: Settings) -> Schedule:
    """The queue's schedule on the ledger's URL (built once per process, URL and queue)."""
    url = settings.effective_ledger_url
    return _stores.built(
        (url, settings.queue), lambda: schedule_from_url(url, queue=settings.queue)
    )


def recognise_parked(settings: Settings, ledger: Ledger) -> bool:
    """Wire this process's ``ledger`` to the queue's schedule: its ``begin`` ends a late copy
    of a first message whose mail is parked or watched, and a mail parked here leaves the
    ledger nothing (its claim and ``first_seen`` dropped once the payload is written:
    :meth:`~mailer.records.ledger.Ledger.parked`). Only a Redis ledger beside a one-shard Redis
    schedule (not on Cluster); False elsewhere, nothing changed."""
    payloads = schedule_for(settings).parked_payloads_key()
    if payloads is None or not ledger.recognise_parked(payloads, stored):
        return False
    _ledgers.put((settings.effective_ledger_url, settings.queue), ledger)
    return True


def park(
    settings: Settings,
    later: Later,
    *,
    task_id: str,
    args: Any,
    kwargs: dict[str, Any],
    always: bool = False,
) -> float | None:
    """Park this deferred run if its wait is longer than ``park_after`` (any wait with
    ``always``): its due time, or None when it keeps a countdown (short wait, parking off, no
    promoter for a memory schedule, or the schedule's Redis is down: the caller then holds a
    countdown, as without parking)."""
    due = parked_until(later, time.time(), settings.park_after, always=always)
    if due is None:
        return None
    store = schedule_for(settings)
    if not _promoted(store):
        return None
    mail_id = str(kwargs["mail_id"])
    entry = Parked(task_id, list(args or ()), kwargs, due, progress=later.progress)
    try:
        store.park(mail_id, due, entry.encode())
    except BackendUnavailable as exc:
        log.warning("mail %s: could not park it, holding a countdown: %s", mail_id, exc)
        return None
    _parked(settings, mail_id)
    crash_point("parking")
    log.info("mail %s parked until %s", mail_id, iso(due), extra={"mail_id": mail_id})
    return due


def _parked(settings: Settings, mail_id: str) -> None:
    """The ledger's claim of ``mail_id``, given back, goes now that the payload is parked (where
    :func:`recognise_parked` wired it). A ledger that is down is only logged: the claim then
    expires with its ``first_seen``."""
    ledger = _ledgers.get((settings.effective_ledger_url, settings.queue))
    if ledger is None:
        return
    try:
        ledger.parked(mail_id)
    except BackendUnavailable as exc:
        log.info("mail %s: its claim is left to expire (ledger unavailable): %s", mail_id, exc)


def _promoted(store: Schedule) -> bool:
    """Whether a promoter can see ``store``: any Redis one; a memory one only in its process."""
    return store.client is not None or promoter_here()


def watch(
    settings: Settings,
    later: Later,
    *,
    task_id: str,
    args: Any,
    kwargs: dict[str, Any],
    due: float,
) -> bool:
    """Keep the payload of a mail about to wait as a countdown ending at ``due`` (epoch s):
    the watchdog publishes it if no run is seen ``watch_grace`` seconds after. True when
    watched; False when no promoter can see the schedule or its Redis is down (logged)."""
    store = schedule_for(settings)
    if not _promoted(store):
        return False
    mail_id = str(kwargs["mail_id"])
    entry = Parked(task_id, list(args or ()), kwargs, due, progress=later.progress)
    try:
        store.watch(mail_id, due + settings.watch_grace, entry.encode())
    except BackendUnavailable as exc:
        log.warning("mail %s: not watched (schedule unavailable): %s", mail_id, exc)
        return False
    return True


def running(settings: Settings, mail_id: str) -> None:
    """A run of ``mail_id`` starts: a watch of it is not due for a claim lease (plus the grace),
    so a long send is not published again. A schedule that is down is only logged."""
    store = schedule_for(settings)
    if not _promoted(store):
        return
    try:
        store.running(mail_id, settings.claim_lease + settings.watch_grace)
    except BackendUnavailable as exc:
        log.info("mail %s: run start not recorded in the schedule: %s", mail_id, exc)


def settled(settings: Settings, mail_id: str) -> None:
    """A run of ``mail_id`` finished (sent, dropped or failed): its entry leaves the schedule.
    A schedule that is down is only logged: the watchdog's copy then ends as a repeat."""
    store = schedule_for(settings)
    if not _promoted(store):
        return
    try:
        store.forget(mail_id)
    except BackendUnavailable as exc:
        log.info("mail %s: entry left in the schedule: %s", mail_id, exc)


def park_call(
    settings: Settings,
    *,
    broker_url: str = "",
    task_id: str,
    args: Any,
    kwargs: dict[str, Any],
    due: float,
) -> bool:
    """Park a ``send_mail`` call at enqueue, for a caller's ``eta`` / ``countdown``
    (epoch seconds on the caller's clock) farther than ``park_after``: the
    promoter publishes it when due, so no worker holds it meanwhile. ``due`` is that
    ``not_before``. True when parked; False
    when the caller must publish it with its ``eta`` instead (a short wait, parking off, a
    memory schedule no promoter of this process reads, or the schedule's Redis down: logged).
    ``broker_url``, the caller's broker, does not choose the schedule: the queue's one is
    promoted by its workers, through their broker."""
    wait = due - time.time()
    if settings.park_after is None or wait <= settings.park_after:
        return False
    store = schedule_for(settings)
    if not _promoted(store):
        return False
    mail_id = str(kwargs.get("mail_id") or task_id)
    requested = kwargs.get("_requested_at")
    progress = Progress(requested_at=float(requested) if requested else time.time())
    entry = Parked(task_id, list(args or ()), kwargs | {"mail_id": mail_id}, due, progress)
    try:
        store.park(mail_id, due, entry.encode())
    except BackendUnavailable as exc:
        log.warning("mail %s: could not park it at enqueue, publishing its eta: %s", mail_id, exc)
        return False
    log.info("mail %s parked until %s (its eta)", mail_id, iso(due), extra={"mail_id": mail_id})
    return True
