"""``mailguard outcome``: a mail's Celery state and outcome, read from the result backend, the
ledger and the schedule."""

from __future__ import annotations

import json
from typing import Any

import click

from mailer.errors import BackendUnavailable, mask_url
from mailer.factory import build_ledger
from mailer.steps import PENDING
from workers.cli import views
from workers.cli.errors import fail
from workers.cli.shared import env_settings, refuse_problems
from workers.waiting.cancelling import Found, lookup
from workers.waiting.outcomes import NO_SHARED_RESULTS, read_state
from workers.waiting.parking import schedule_for


@click.command(short_help="Show a mail's state and outcome.")
@click.argument("mail_id")
@click.option("--json", "as_json", is_flag=True, help="Print state and outcome as JSON.")
def outcome(mail_id: str, as_json: bool) -> None:
    """The state and outcome of MAIL_ID (exit 1: unknown id).

    MAIL_ID is the task id ``send_mail.delay`` returned, or the mail's own ``mail_id``. The
    result backend tells a task id's state; with the workers' shared ledger, a mail id's final
    outcome is found there, and a mail waiting in the schedule (parked, or a countdown a worker
    holds) is shown deferred with its slot, also without a result backend
    (:func:`workers.waiting.cancelling.lookup`). Without one (``MAILGUARD_RESULT_BACKEND``), a task
    id that is not the mail id, or a countdown mail the schedule does not watch, cannot be told:
    the error says so.
    """
    app, _ = celery()
    found = find(app, mail_id)
    if found.state == PENDING:
        fail(f"no outcome for mail id {mail_id!r}: {unknown_because(found)}")
    show_outcome(mail_id, found.state, found.meta, as_json)


def unknown_because(found: Found) -> str:
    """Why a ``PENDING`` mail is not known, as far as this process can tell."""
    settings = env_settings()
    if found.results_shared:
        return "unknown, expired, or not yet taken by a worker"
    if settings.effective_ledger_url.startswith("memory:"):
        return (
            f"{NO_SHARED_RESULTS} and the ledger is memory:// (MAILGUARD_LEDGER_URL): "
            "this command cannot see the workers' outcomes"
        )
    return (
        f"not in the ledger or the schedule, and {NO_SHARED_RESULTS} to tell a countdown "
        "a worker holds or a task id that is not the mail id"
    )


def find(app: Any, given: str) -> Found:
    """``given``'s state and outcome, a task id or (with a shared ledger) a mail id; a store
    that cannot be read is exit 1."""
    settings = env_settings()
    ledger = schedule = None
    try:
        if not settings.effective_ledger_url.startswith("memory:"):
            ledger, schedule = build_ledger(settings), schedule_for(settings)
        found = lookup(app, given, ledger, schedule, settings)
    except BackendUnavailable as exc:
        fail(str(exc))
    except Exception as exc:
        fail(f"cannot read the result backend {mask_url(app.conf.result_backend)}: {exc}")
    return found


def celery() -> tuple[Any, Any]:
    """mailguard's Celery app and ``send_mail`` (Celery is imported here, on use)."""
    refuse_problems(env_settings())
    from workers.app import app  # noqa: PLC0415 - Celery only when needed
    from workers.tasks import send_mail  # noqa: PLC0415

    return app, send_mail


def read(app: Any, mail_id: str) -> tuple[str, Any]:
    """``mail_id``'s state and outcome; a result backend that cannot be read is exit 1."""
    try:
        return read_state(app, mail_id)
    except Exception as exc:
        fail(f"cannot read the result backend {mask_url(app.conf.result_backend)}: {exc}")


def show_outcome(mail_id: str, state: str, meta: Any, as_json: bool) -> None:
    """The state and outcome, as a table or as JSON."""
    if as_json:
        click.echo(json.dumps({"mail_id": mail_id, "state": state, "outcome": meta}, indent=2))
    else:
        views.show_outcome(mail_id, state, meta)
