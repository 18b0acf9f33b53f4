"""``mailguard cancel``: cancel a waiting mail (parked or deferred); every recipient's slot back.

Needs the workers' shared ledger (``MAILGUARD_LEDGER_URL``, else the limiter's URL: a
``redis://``), where the schedule lives. Addresses are never printed. The work is
:mod:`workers.waiting.cancelling`'s, shared with :func:`workers.tasks.cancel`.
"""

from __future__ import annotations

import click

from mailer.errors import BackendUnavailable
from mailer.factory import build_ledger
from workers.cli.errors import confirmed, fail
from workers.cli.shared import shared_ledger_settings
from workers.waiting.cancelling import (
    CANCEL_LEASE,
    NotCancelled,
    cancel_waiting,
    envelope_keys,
    lookup,
    waiting,
)
from workers.waiting.cancelling import cancelled_outcome as _cancelled
from workers.waiting.parking import schedule_for

__all__ = ["CANCEL_LEASE", "_cancelled", "cancel", "envelope_keys"]


@click.command(short_help="Cancel a waiting mail (parked or deferred); its slot is freed.")
@click.argument("mail_id")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def cancel(mail_id: str, yes: bool) -> None:
    """Cancel MAIL_ID before it is sent: it ends dropped/cancelled and its slot is given back.

    A parked mail leaves the schedule at once and every recipient (to, cc, bcc) gets its slot
    back; a mail waiting as a countdown finds itself cancelled when it runs (nothing is sent)
    and gives its slots back then. MAIL_ID is the id ``send_mail.delay`` returned (the task id)
    or the mail's own ``mail_id``; without a shared result backend (``MAILGUARD_RESULT_BACKEND``)
    a waiting mail is found by its mail id in the schedule.
    """
    settings = shared_ledger_settings("schedule")
    from workers.app import app  # noqa: PLC0415 - Celery only when needed

    try:
        ledger, schedule = build_ledger(settings), schedule_for(settings)
        found = lookup(app, mail_id, ledger, schedule)
        waiting(found, schedule)
        confirmed(f"Cancel mail {found.mail_id}?", yes=yes, refused="not cancelled")
        parked = schedule.payload(found.mail_id) is not None
        cancel_waiting(app, settings, found, (ledger, schedule))
    except (NotCancelled, BackendUnavailable) as exc:
        fail(str(exc))
    click.echo(f"cancelled {found.mail_id}" + (" (parked; slot freed)" if parked else ""))
