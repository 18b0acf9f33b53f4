"""``mailguard retry``: enqueue a failed mail again, once, under a new mail id linked to the
old one (:mod:`workers.waiting.failed`).

Needs the workers' shared ledger (``MAILGUARD_LEDGER_URL``, else the limiter's URL: a
``redis://``), where the failed mails' payloads are kept. Addresses are never printed.
"""

from __future__ import annotations

import time
from typing import Any

import click

from mailer.durations import parse_duration
from mailer.errors import BackendUnavailable
from mailer.factory import build_ledger
from mailer.settings import Settings
from workers.cli.errors import USAGE, fail
from workers.cli.shared import shared_ledger_settings
from workers.waiting.failed import NotRetried, failed_since, retry_id
from workers.waiting.failed import retry as retry_mail


@click.command(short_help="Send a failed mail again, once (a new mail id linked to it).")
@click.argument("mail_id", required=False)
@click.option("--failed", "every", is_flag=True, help="Retry every failed mail kept (--since).")
@click.option("--since", metavar="DURATION", help="With --failed: those that failed this recently.")
def retry(mail_id: str | None, every: bool, since: str | None) -> None:
    """Enqueue the failed MAIL_ID again, once, as MAIL_ID.retry1 (a retry of that as .retry2).

    A mail that ended failed (a permanent refusal that is not a hard bounce, a fault of the
    sender's configuration) keeps its payload for MAILGUARD_FAILED_RETENTION (7d). The retry
    takes it in one atomic step: run twice, or on two hosts at once, it enqueues one copy. The
    old id's outcome stays failed; the new id has its own (``mailguard outcome MAIL_ID.retry1``).
    A mail that was sent or dropped, retried already, or past its retention is refused in one
    line (exit 1). ``--failed --since 1h`` retries each mail kept that failed in the last hour.
    """
    if every == (mail_id is not None):
        fail("give a MAIL_ID, or --failed --since DURATION", USAGE)
    if since is not None and not every:
        fail("--since goes with --failed", USAGE)
    settings = shared_ledger_settings("failed mails")
    from workers.tasks import send_mail  # noqa: PLC0415 - Celery only when needed

    def publish(args: list[Any], kwargs: dict[str, Any], task_id: str) -> object:
        return send_mail.apply_async(args, kwargs, task_id=task_id)

    if mail_id is not None:
        try:
            new_id = retry_mail(settings, mail_id, build_ledger(settings), publish)
        except (NotRetried, BackendUnavailable) as exc:
            fail(str(exc))
        click.echo(f"retried {mail_id} as {new_id}")
        return
    _retry_since(settings, _window(since), publish)


def _window(since: str | None) -> float:
    """``--since``'s duration in seconds; missing or bad is exit 2."""
    if since is None:
        fail("--failed needs --since DURATION (e.g. 1h)", USAGE)
    try:
        return parse_duration(since)
    except ValueError as exc:
        fail(f"--since: {exc}", USAGE)


def _retry_since(settings: Settings, window: float, publish: Any) -> None:
    """Retry each kept mail that failed in the last ``window`` seconds; one line each."""
    try:
        ledger = build_ledger(settings)
        found = failed_since(settings, time.time() - window)
    except BackendUnavailable as exc:
        fail(str(exc))
    retried = 0
    for mail_id in found:
        try:
            click.echo(f"retried {mail_id} as {retry_mail(settings, mail_id, ledger, publish)}")
            retried += 1
        except NotRetried as exc:  # another retry took it meanwhile: said, and carried on
            click.echo(f"skipped: {exc}", err=True)
        except BackendUnavailable as exc:
            fail(f"{exc} (retried {retried} before)")
    click.echo(f"{retried} failed mail(s) retried")


__all__ = ["retry", "retry_id"]
