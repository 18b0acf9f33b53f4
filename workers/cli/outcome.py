"""``mailguard outcome``: a mail's Celery state and outcome, read from the result backend."""

from __future__ import annotations

import json
from typing import Any

import click

from mailer.errors import mask_url
from mailer.steps import PENDING
from workers.cli import views
from workers.cli.errors import fail
from workers.cli.shared import env_settings, refuse_problems
from workers.outcomes import read_state


@click.command(short_help="Show a mail's state and outcome.")
@click.argument("mail_id")
@click.option("--json", "as_json", is_flag=True, help="Print state and outcome as JSON.")
def outcome(mail_id: str, as_json: bool) -> None:
    """The state and outcome of MAIL_ID from the result backend (exit 1: unknown id)."""
    app, _ = celery()
    state, meta = read(app, mail_id)
    if state == PENDING:
        fail(f"no outcome for mail id {mail_id!r}: unknown, expired, or not yet taken by a worker")
    show_outcome(mail_id, state, meta, as_json)


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
