"""``mailguard cancel / scheduled``: cancel a waiting mail; what waits in the schedule.

Both need the workers' shared ledger (``MAILGUARD_LEDGER_URL``, else the limiter's URL: a
``redis://``), where the schedule lives. Addresses are never printed.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

import click

from mailer import outcomes as why
from mailer.errors import BackendUnavailable, InvalidAddress
from mailer.factory import build_guard_limiter, build_ledger
from mailer.mail.address import normalise_address
from mailer.mail.envelope import addresses
from mailer.outcomes import Outcome
from mailer.settings import Settings
from workers import views
from workers.cli_errors import fail, shared_ledger_settings
from workers.parking import schedule_for
from workers.payload import Parked

#: How long ``cancel`` holds the mail's claim while it records the cancellation, in seconds.
CANCEL_LEASE = 30.0


def _settings() -> Settings:
    return shared_ledger_settings("schedule")


@click.command(short_help="Cancel a waiting mail (parked or deferred); its slot is freed.")
@click.argument("mail_id")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def cancel(mail_id: str, yes: bool) -> None:
    """Cancel MAIL_ID before it is sent: it ends dropped/cancelled and its slot is given back.

    A parked mail leaves the schedule at once; a mail waiting as a countdown finds itself
    cancelled when it runs (nothing is sent) and gives its slot back then. MAIL_ID is the id
    ``send_mail.delay`` returned (the task id) or, for a mail sent with a ``mail_id`` of its
    own, that id while the mail is parked.
    """
    settings = _settings()
    from workers.app import app  # noqa: PLC0415 - Celery only when needed
    from workers.outcomes import read_state  # noqa: PLC0415

    given = mail_id
    try:
        state, meta = read_state(app, given)
        if state == "DEFERRED" and isinstance(meta, Mapping) and meta.get("mail_id"):
            mail_id = str(meta["mail_id"])  # the ledger and the schedule know the mail id
        ledger = build_ledger(settings)
        schedule = schedule_for(settings)
        parked = schedule.payload(mail_id)
        if parked is None and state != "DEFERRED":
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
    app.backend.store_result(task_id, outcome.as_dict(), "SUCCESS")
    click.echo(f"cancelled {mail_id}" + (" (parked; slot freed)" if payload else ""))


def _cancelled(settings: Settings, mail_id: str, meta: Any, payload: bytes | None) -> Outcome:
    """The ``dropped`` / ``cancelled`` outcome; a parked mail's slot is released here."""
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
        return outcome  # a countdown mail gives its slot back when it runs (the guard)
    try:
        entry = Parked.decode(payload, mail_id)
        keys = _limit_keys(entry, settings)
    except (ValueError, InvalidAddress):
        return outcome  # nothing to release: the mail was never admitted
    limiter = build_guard_limiter(settings)
    try:
        tenant = entry.kwargs.get("tenant")
        for key in keys:  # every recipient's slot back, in every scope
            limiter.release(key, mail_id, tenant=tenant if isinstance(tenant, str) else None)
        hashed = limiter.storage_key("recipient", keys[0])
        return outcome.but(recipient=hashed, kind=str(entry.kwargs.get("kind", "default")))
    finally:
        limiter.close()


def _limit_keys(entry: Parked, settings: Settings) -> list[str]:
    """The limit keys of a parked mail's envelope (To, Cc, Bcc; deduplicated, the first To's
    first), as the guard booked them; ``InvalidAddress`` when the guard would have dropped it."""
    rules = settings.guard_config().rules
    to = entry.args[0] if entry.args else entry.kwargs.get("to")
    everyone = [
        *addresses(to, "to"),
        *addresses(entry.kwargs.get("cc"), "cc"),
        *addresses(entry.kwargs.get("bcc"), "bcc"),
    ]
    keys = list(dict.fromkeys(normalise_address(a, rules).limit_key for a in everyone))
    if not keys:
        raise InvalidAddress("to: no address")
    return keys


@click.command(short_help="How many mails wait in the schedule, by due hour and kind.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def scheduled(as_json: bool) -> None:
    """How many mails are parked, by due hour (UTC) and by kind; promoting; dead letters."""
    settings = _settings()
    schedule = schedule_for(settings)
    hours: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    try:
        stats = schedule.stats()
        for mail_id, due, payload in schedule.scan():
            try:
                kwargs = Parked.decode(payload, mail_id).kwargs
            except ValueError:
                kwargs = {}
            kinds[str(kwargs.get("kind", "default"))] += 1
            hours["promoting" if due is None else views.when(due - due % 3600)[:16]] += 1
        dead = [mail_id for mail_id, _ in schedule.dead_letters()]
    except BackendUnavailable as exc:
        fail(str(exc))
    report: dict[str, Any] = {
        "parked": stats.parked,
        "promoting": stats.promoting,
        "dead_letters": stats.dead,
        "earliest_due": stats.earliest_due,
        "by_hour": dict(sorted(hours.items())),
        "by_kind": dict(sorted(kinds.items())),
        "dead_letter_ids": dead,
    }
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    earliest = "-" if stats.earliest_due is None else views.when(stats.earliest_due)
    click.echo(f"parked {stats.parked}, promoting {stats.promoting}, dead letters {stats.dead}")
    click.echo(f"earliest due {earliest}")
    for title, counts in (("due hour (UTC)", hours), ("kind", kinds)):
        click.echo(f"  {title:<20} mails")
        for name, count in sorted(counts.items()):
            click.echo(f"  {name:<20} {count:>5}")
    for mail_id in dead:
        click.echo(f"dead letter: {mail_id}")
