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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mailer import outcomes as why
from mailer.crashpoints import crash_point
from mailer.errors import InvalidAddress, MailguardError
from mailer.factory import build_guard_limiter
from mailer.limits.limiter import Limiter
from mailer.mail.address import AddressRules, normalise_address
from mailer.mail.envelope import addresses
from mailer.outcomes import Outcome
from mailer.records.ledger import Ledger
from mailer.records.schedule import Schedule
from mailer.settings import Settings
from mailer.steps import DEFERRED, PENDING, celery_state
from workers.outcomes import read_state
from workers.payload import Parked

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
    mail id, Celery state and outcome (meta)."""

    task_id: str
    mail_id: str
    state: str
    meta: Any


def lookup(app: Celery, given: str, ledger: Ledger | None, schedule: Schedule | None) -> Found:
    """The mail ``given`` names, a task id or a mail id: the result backend's state of a task
    id; else the ledger's final outcome of a mail id; else the state of the task a parked or
    watched mail id names in the schedule; else ``PENDING``. Raises what the result backend
    raises, and ``BackendUnavailable``."""
    state, meta = read_state(app, given)
    if state != PENDING:
        mail_id = meta.get("mail_id") if isinstance(meta, Mapping) else None
        return Found(given, str(mail_id or given), state, meta)
    recorded = ledger.recorded(given) if ledger is not None else None
    if recorded is not None:
        return Found(given, given, celery_state(recorded.status), recorded.as_dict())
    payload = schedule.payload(given) if schedule is not None else None
    if payload is not None:
        try:
            task_id = Parked.decode(payload, given).task_id
        except ValueError:
            task_id = given
        if task_id != given:
            state, meta = read_state(app, task_id)
        return Found(task_id, given, state, meta)
    return Found(given, given, PENDING, meta)


def waiting(found: Found, schedule: Schedule) -> str:
    """The mail id to cancel, if ``found`` waits (parked, watched, or DEFERRED); else
    :class:`NotCancelled`."""
    if schedule.payload(found.mail_id) is None and found.state != DEFERRED:
        raise NotCancelled(
            f"mail {found.mail_id!r} is not waiting (state {found.state}): nothing to cancel"
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
    try:
        entry = Parked.decode(payload, mail_id)
        keys = envelope_keys(entry.args, entry.kwargs, settings.guard_config().rules)
    except (ValueError, InvalidAddress):
        return outcome  # nothing to release: the mail was never admitted
    if not keys:
        return outcome
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
