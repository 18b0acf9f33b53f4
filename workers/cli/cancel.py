"""``mailguard cancel``: cancel a waiting mail (parked or deferred); every recipient's slot back.

Needs the workers' shared ledger (``MAILGUARD_LEDGER_URL``, else the limiter's URL: a
``redis://``), where the schedule lives. Addresses are never printed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import click

from mailer import outcomes as why
from mailer.errors import BackendUnavailable, InvalidAddress
from mailer.factory import build_guard_limiter, build_ledger
from mailer.mail.address import AddressRules, normalise_address
from mailer.mail.envelope import addresses
from mailer.outcomes import Outcome
from mailer.settings import Settings
from mailer.steps import DEFERRED, celery_state
from workers.cli.errors import fail
from workers.cli.shared import shared_ledger_settings
from workers.outcomes import read_state
from workers.parking import schedule_for
from workers.payload import Parked

#: How long ``cancel`` holds the mail's claim while it records the cancellation, in seconds.
CANCEL_LEASE = 30.0


@click.command(short_help="Cancel a waiting mail (parked or deferred); its slot is freed.")
@click.argument("mail_id")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def cancel(mail_id: str, yes: bool) -> None:
    """Cancel MAIL_ID before it is sent: it ends dropped/cancelled and its slot is given back.

    A parked mail leaves the schedule at once and every recipient (to, cc, bcc) gets its slot
    back; a mail waiting as a countdown finds itself cancelled when it runs (nothing is sent)
    and gives its slots back then. MAIL_ID is the id ``send_mail.delay`` returned (the task id)
    or, for a mail sent with a ``mail_id`` of its own, that id while the mail is parked.
    """
    settings = shared_ledger_settings("schedule")
    from workers.app import app  # noqa: PLC0415 - Celery only when needed

    given = mail_id
    try:
        state, meta = read_state(app, given)
        if state == DEFERRED and isinstance(meta, Mapping) and meta.get("mail_id"):
            mail_id = str(meta["mail_id"])  # the ledger and the schedule know the mail id
        ledger = build_ledger(settings)
        schedule = schedule_for(settings)
        parked = schedule.payload(mail_id)
        if parked is None and state != DEFERRED:
            fail(f"mail {given!r} is not waiting (state {state}): nothing to cancel")
        if not yes and not click.confirm(f"Cancel mail {mail_id}?", err=True):
            fail("not cancelled")
        owner = f"cancel-{uuid.uuid4().hex}"
        begun = ledger.begin(mail_id, owner, CANCEL_LEASE)
        if isinstance(begun, Outcome):
            fail(f"mail {mail_id!r} already {begun.status}: nothing to cancel")
        if not begun:
            fail(f"mail {mail_id!r} is being sent right now: too late to cancel")
        payload = schedule.cancel(mail_id)
        outcome = _cancelled(settings, mail_id, meta, payload)
        ledger.record(outcome)
    except BackendUnavailable as exc:
        fail(str(exc))
    task_id = Parked.decode(payload, mail_id).task_id if payload else given
    app.backend.store_result(task_id, outcome.as_dict(), celery_state(outcome.status))
    click.echo(f"cancelled {mail_id}" + (" (parked; slot freed)" if payload else ""))


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


def _cancelled(settings: Settings, mail_id: str, meta: Any, payload: bytes | None) -> Outcome:
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
    hashed = _release(settings, keys, mail_id, tenant if isinstance(tenant, str) else None)
    return outcome.but(recipient=hashed, kind=str(entry.kwargs.get("kind", "default")))


def _release(settings: Settings, keys: list[str], mail_id: str, tenant: str | None) -> str:
    """Give ``mail_id``'s slot back to every recipient in ``keys`` (in every scope of a scoped
    policy, ``tenant``'s included); the first recipient's hash, as the outcome shows it."""
    limiter = build_guard_limiter(settings)
    try:
        for key in keys:
            limiter.release(key, mail_id, tenant=tenant)
        return limiter.storage_key("recipient", keys[0])
    finally:
        limiter.close()
