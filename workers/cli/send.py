"""``mailguard send``: enqueue a mail, checked first as the worker would check it; ``--wait``
follows it to its outcome."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import click

from mailer import render
from mailer.errors import InvalidMessage, mask_url
from mailer.steps import DEFERRED, FINAL_STATES
from workers.cli import views
from workers.cli.errors import REFUSED, USAGE, fail
from workers.cli.outcome import celery, read, show_outcome
from workers.cli.shared import env_settings, recipient_key


@click.command(short_help="Enqueue a mail; print its mail id (--wait: its outcome).")
@click.argument("address")
@click.option("--subject", help="Subject (else the kind's template).")
@click.option("--body", help="Text body (else the kind's template).")
@click.option("--kind", default="default", show_default=True, help="Kind of mail.")
@click.option("--context", "context_json", help='Template variables as JSON: \'{"code": "1"}\'.')
@click.option("--mail-id", help="Mail id (default: a new task id); one mail per id, ever.")
@click.option("--wait", is_flag=True, help="Wait for the outcome and print it.")
@click.option(
    "--timeout",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="With --wait: give up waiting after this many seconds (the mail still goes).",
)
def send(
    *,
    address: str,
    subject: str | None,
    body: str | None,
    kind: str,
    context_json: str | None,
    mail_id: str | None,
    wait: bool,
    timeout: float,
) -> None:
    """Enqueue a mail to ADDRESS and print its mail id.

    The input is checked first (address, kind, templates), so a mail the worker would drop
    as invalid is refused here. Exit 1 if --wait ends with the mail dropped or failed.
    """
    settings = env_settings()
    recipient_key(address)
    context = _context(context_json)
    try:
        render(settings.kinds[kind], subject, body, None, context)
    except InvalidMessage as exc:
        fail(str(exc), USAGE)
    if settings.broker_url.startswith("memory:"):
        fail(
            "MAILGUARD_BROKER_URL is memory://, which no worker outside this process can read; "
            "set it to the workers' broker (redis://...)",
        )
    app, send_mail = celery()
    options: dict[str, Any] = {"task_id": mail_id} if mail_id else {}
    kwargs = {"subject": subject, "body": body, "kind": kind, "context": context}
    try:
        result = send_mail.apply_async(args=[address], kwargs=kwargs, retry=False, **options)
    except Exception as exc:
        fail(f"cannot enqueue on the broker {mask_url(settings.broker_url)}: {exc}")
    click.echo(result.id)
    if wait:
        _wait(app, result.id, timeout)


def _context(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        fail(f"--context is not valid JSON: {exc}", USAGE)
    if not isinstance(value, dict):
        fail('--context must be a JSON object such as \'{"code": "1234"}\'', USAGE)
    return value


def _wait(app: Any, mail_id: str, timeout: float) -> None:
    """Follow ``mail_id`` to its outcome (each new booking on stderr); exit 1 unless sent."""
    deadline = time.monotonic() + timeout
    shown = None
    while True:
        state, meta = read(app, mail_id)
        if state in FINAL_STATES:
            break
        if state == DEFERRED and isinstance(meta, Mapping) and meta.get("due") != shown:
            shown = meta.get("due")
            tier = f", tier {meta['tier']}" if meta.get("tier") else ""
            due = f" until {views.when(float(shown))}" if shown else ""
            click.echo(f"deferred{due} ({meta.get('reason')}{tier})", err=True)
        if time.monotonic() >= deadline:
            fail(
                f"no outcome within {views.duration(timeout)} (state {state}); "
                "see `mailguard outcome`"
            )
        time.sleep(0.2)
    show_outcome(mail_id, state, meta, as_json=False)
    status_ = meta.get("status") if isinstance(meta, Mapping) else None
    if status_ != "sent":
        raise click.exceptions.Exit(REFUSED)
