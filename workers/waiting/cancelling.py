"""Finding a mail by its task id or its mail id, and cancelling a waiting one: what
``mailguard outcome`` and ``mailguard cancel`` do, and :func:`workers.tasks.cancel` in Python.

A mail's **task id** is what ``send_mail.delay`` returned; its **mail id** is the caller's
``mail_id`` (the task id when none was given). The result backend knows task ids; the ledger
(final outcomes) and the schedule (parked and watched mails, whose payload names the task id)
know mail ids. :func:`lookup` tries them in that order.

Cancelling needs the stores the workers share (a ``redis://`` ledger), or runs in the process of
an in-process worker (:func:`workers.tasks.cancel` then uses that worker's own stores).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mailer import AddressRules, Limiter, normalise_address
from mailer import outcomes as why
from mailer.crashpoints import crash_point
from mailer.errors import InvalidAddress, MailguardError
from mailer.factory import build_guard_limiter
from mailer.mail import addresses
from mailer.outcomes import Outcome
from mailer.records.ledger import Ledger
from mailer.records.schedule import Schedule
from mailer.settings import Settings
from mailer.steps import DEFERRED, PENDING, celery_state
from workers.waiting.outcomes import NO_SHARED_RESULTS, read_state, results_shared
from workers.waiting.payload import Parked

if TYPE_CHECKING:
    from celery import Celery

#: How long a cancellation holds the mail's claim while it records it, in seconds.
CANCEL_LEASE = 30.0


class NotCancelled(MailguardError):
    """The mail could not be cancelled; the message says why in one line (not waiting, already
    sent, being sent right now)."""


@dataclass(frozen=True)
class Found:
    """A mail as found by :func:`lookup`: its task id (the id given when nothing maps it),
    mail id, Celery state and outcome (meta); ``results_shared``: whether the result backend
    could have told (:func:`~workers.waiting.outcomes.results_shared`), so a ``PENDING`` means
    unknown rather than unknowable."""

    task_id: str
    mail_id: str
    state: str
    meta: Any
    results_shared: bool = True


def lookup(
    app: Celery,
    given: str,
    ledger: Ledger | None,
    schedule: Schedule | None,
    settings: Settings | None = None,
) -> Found:
    """The mail ``given`` names, a task id or a mail id: the result backend's state of a task
    id; else the ledger's final outcome of a mail id; else, for a mail id waiting in the
    schedule (parked, or a countdown a worker holds), its task's state, or ``DEFERRED`` with
    what the schedule knows (:func:`waiting_outcome`) when the result backend has none; else
    ``PENDING``. With ``settings``, a waiting mail's outcome names its recipient key
    (:func:`with_recipient`). Raises what the result backend raises, and
    ``BackendUnavailable``."""
    found = _lookup(app, given, ledger, schedule)
    return with_recipient(found, schedule, settings)


def _lookup(app: Celery, given: str, ledger: Ledger | None, schedule: Schedule | None) -> Found:
    state, meta = read_state(app, given)
    if state != PENDING:
        mail_id = meta.get("mail_id") if isinstance(meta, Mapping) else None
        return Found(given, str(mail_id or given), state, meta)
    recorded = ledger.recorded(given) if ledger is not None else None
    if recorded is not None:
        return Found(given, given, celery_state(recorded.status), recorded.as_dict())
    payload = schedule.payload(given) if schedule is not None else None
    if payload is None:
        return Found(given, given, PENDING, meta, results_shared(app))
    try:
        entry: Parked | None = Parked.decode(payload, given)
    except ValueError:
        entry = None
    task_id = entry.task_id if entry is not None else given
    if task_id != given:
        state, meta = read_state(app, task_id)
    if state == PENDING and entry is not None:
        state, meta = DEFERRED, waiting_outcome(entry, results_shared(app)).as_dict()
    return Found(task_id, given, state, meta, results_shared(app))


def with_recipient(found: Found, schedule: Schedule | None, settings: Settings | None) -> Found:
    """``found`` with the recipient key of its outcome, when it waits (``DEFERRED``) and names
    none: a waiting mail's record leaves it to the schedule, whose entry holds the mail
    (:meth:`~mailer.outcomes.Outcome.as_waiting_dict`). As it was when it names one, when it
    is not in ``schedule``, or without ``settings`` (the secret the key is hashed with)."""
    meta = found.meta
    if (
        found.state != DEFERRED
        or not isinstance(meta, Mapping)
        or meta.get("recipient")
        or schedule is None
        or settings is None
    ):
        return found
    payload = schedule.payload(found.mail_id)
    admitted = entry_keys(settings, payload, found.mail_id) if payload is not None else None
    if admitted is None:
        return found
    limiter = build_guard_limiter(settings)
    try:
        recipient = limiter.storage_key("recipient", admitted[1][0])
    except ValueError:
        return found  # a policy with no recipient scope
    finally:
        limiter.close()
    return replace(found, meta={**meta, "recipient": recipient})


def entry_keys(settings: Settings, payload: bytes, mail_id: str) -> tuple[Parked, list[str]] | None:
    """A mail's schedule entry and the limit keys of its envelope recipients (the first is the
    one its outcome names, hashed); None when the payload cannot be read or names no valid
    address (the mail was never admitted)."""
    try:
        entry = Parked.decode(payload, mail_id)
        keys = envelope_keys(entry.args, entry.kwargs, settings.guard_config().rules)
    except (ValueError, InvalidAddress):
        return None
    return (entry, keys) if keys else None


def waiting_outcome(entry: Parked, shared: bool) -> Outcome:
    """The ``deferred`` outcome of a mail waiting in the schedule, from its entry alone (its
    kind, slot and deferrals; no recipient), for when the result backend has no state of it:
    none is ``shared`` across processes, or its state expired."""
    progress = entry.progress
    why_here = NO_SHARED_RESULTS if not shared else "the result backend has no state of it"
    return Outcome(
        status="deferred",
        mail_id=entry.mail_id,
        kind=str(entry.kwargs.get("kind") or "default"),
        due=entry.due,
        deferrals=progress.deferrals if progress is not None else 0,
        detail=(
            "waiting in the schedule for its slot (parked, or booked as a countdown a worker "
            f"holds); read from the schedule: {why_here}"
        ),
    )


def waiting(found: Found, schedule: Schedule) -> str:
    """The mail id to cancel, if ``found`` waits (parked, watched, or DEFERRED); else
    :class:`NotCancelled`."""
    if schedule.payload(found.mail_id) is None and found.state != DEFERRED:
        if found.state == PENDING and not found.results_shared:
            raise NotCancelled(
                f"mail {found.mail_id!r} is not in the schedule or the ledger, and "
                f"{NO_SHARED_RESULTS} to tell whether it waits as a countdown: nothing "
                "cancelled (a task id is found there only when it is the mail id)"
            )
        status = found.meta.get("status") if isinstance(found.meta, Mapping) else None
        ended = f"already {status}, " if status in ("sent", "dropped", "failed") else ""
        raise NotCancelled(
            f"mail {found.mail_id!r} is not waiting (state {found.state}): {ended}nothing to cancel"
        )
    return found.mail_id


def cancel_waiting(
    app: Celery,
    settings: Settings,
    found: Found,
    stores: tuple[Ledger, Schedule],
    limiter: Limiter | None = None,
) -> Outcome:
    """Cancel the waiting mail ``found``: ``dropped`` / ``cancelled`` recorded in the ledger
    (every later run of it finds it) and stored as its task's result; a parked mail leaves the
    schedule and every recipient gets its slot back (from ``limiter``, else one built from
    ``settings``). Raises :class:`NotCancelled` and ``BackendUnavailable``."""
    ledger, schedule = stores
    mail_id = waiting(found, schedule)
    begun = ledger.begin(mail_id, f"cancel-{uuid.uuid4().hex}", CANCEL_LEASE)
    if isinstance(begun, Outcome):
        raise NotCancelled(f"mail {mail_id!r} already {begun.status}: nothing to cancel")
    if not begun:
        raise NotCancelled(f"mail {mail_id!r} is being sent right now: too late to cancel")
    # Recorded before the entry leaves the schedule: killed in between, the promoted run finds
    # the mail cancelled; the other way round the mail would be in neither (lost).
    payload = schedule.payload(mail_id)
    outcome = cancelled_outcome(settings, mail_id, found.meta, payload, limiter)
    ledger.record(outcome)
    crash_point("cancel")
    schedule.cancel(mail_id)
    task_id = Parked.decode(payload, mail_id).task_id if payload else found.task_id
    app.backend.store_result(task_id, outcome.as_dict(), celery_state(outcome.status))
    return outcome


def envelope_keys(args: Any, kwargs: Mapping[str, Any], rules: AddressRules) -> list[str]:
    """The limit keys of every envelope recipient of a ``send_mail`` call (to, an address or a
    list, given as the first argument or by name; cc; bcc), deduplicated in that order, as the
    guard derives them. Raises ``InvalidAddress`` for a malformed one."""
    to = args[0] if args else kwargs.get("to")
    everyone = [
        *addresses(to, "to"),
        *addresses(kwargs.get("cc"), "cc"),
        *addresses(kwargs.get("bcc"), "bcc"),
    ]
    return list(dict.fromkeys(normalise_address(a, rules).limit_key for a in everyone))


def cancelled_outcome(
    settings: Settings,
    mail_id: str,
    meta: Any,
    payload: bytes | None,
    limiter: Limiter | None = None,
) -> Outcome:
    """The ``dropped`` / ``cancelled`` outcome; a parked mail's slots are released here."""
    known = meta if isinstance(meta, Mapping) else {}
    outcome = Outcome(
        status="dropped",
        mail_id=mail_id,
        kind=str(known.get("kind") or "default"),
        reason=why.CANCELLED,
        recipient=known.get("recipient"),
        tier=known.get("tier"),
        due=known.get("due"),
        deferrals=int(known.get("deferrals") or 0),
        decided_at=time.time(),
        detail="cancelled by an operator",
    )
    if payload is None:
        return outcome  # a countdown mail gives its slots back when it runs (the guard)
    admitted = entry_keys(settings, payload, mail_id)
    if admitted is None:
        return outcome  # nothing to release: the mail was never admitted
    entry, keys = admitted
    tenant = entry.kwargs.get("tenant")
    tenant = tenant if isinstance(tenant, str) else None
    own = limiter is None
    limiter = build_guard_limiter(settings) if limiter is None else limiter
    try:
        for key in keys:
            limiter.release(key, mail_id, tenant=tenant)
        hashed = limiter.storage_key("recipient", keys[0])
    finally:
        if own:
            limiter.close()
    return outcome.but(recipient=hashed, kind=str(entry.kwargs.get("kind", "default")))
