"""``mailguard reputation [resume SENDER]``: each sender's volume, rates and pause, and the
lift of a pause by hand.

The counters are the workers' (``MAILGUARD_REPUTATION`` on, the ledger's shared Redis): per
sender over ``MAILGUARD_REPUTATION_WINDOW``, the mails sent, hard bounces and complaints. A
sender whose rate crossed its threshold is **paused**: its bulk kinds wait. ``resume`` lifts the
pause at once and releases the mails that waited on it (:mod:`workers.waiting.reputation_release`),
forgiving the window's bounces and complaints, and records who and when (shown here
afterwards); a pause also lifts by itself when the rate falls back.
"""

from __future__ import annotations

import getpass
import json
import socket
from dataclasses import asdict

import click
from rich import box
from rich.table import Table

from mailer.errors import BackendUnavailable
from mailer.factory import build_reputation
from mailer.records.reputation import Reputation, Standing, percent, sender_of
from mailer.settings import Settings
from workers.cli import views
from workers.cli.errors import USAGE, fail
from workers.cli.shared import shared_ledger_settings
from workers.waiting.parking import schedule_for
from workers.waiting.reputation_release import release_paused


def _open() -> Reputation:
    return _opened()[1]


def _opened() -> tuple[Settings, Reputation]:
    settings = shared_ledger_settings("sender reputation")
    reputation = build_reputation(settings)
    if reputation is None:
        fail("MAILGUARD_REPUTATION is off: nothing is counted; set it as the workers do", USAGE)
    return settings, reputation


def state_of(standing: Standing) -> str:
    """``PAUSED since ...: complaint 0.5% >= 0.3%``, ``resumed by ... at ...`` or ``sending``."""
    pause = standing.pause
    if pause is None:
        return "sending"
    if pause.paused:
        return (
            f"PAUSED since {views.when(pause.since)}: {pause.rate} {percent(pause.value)} >= "
            f"{percent(pause.threshold)}"
        )
    how = "by itself" if pause.lifted_by == "auto" else f"by {pause.lifted_by}"
    forgiven = ""
    if pause.forgiven:
        forgiven = (
            f" (forgave {pause.forgiven.get('complained', 0)} complaints, "
            f"{pause.forgiven.get('bounced', 0)} bounces)"
        )
    return f"sending; resumed {how} at {views.when(pause.lifted_at)}{forgiven}"


@click.group(invoke_without_command=True, short_help="Each sender's volume, rates and pause.")
@click.option("--json", "as_json", is_flag=True, help="Print the standings as JSON.")
@click.pass_context
def reputation(ctx: click.Context, as_json: bool) -> None:
    """Each sender's mails sent, hard bounces and complaints over the window, their rates
    against the thresholds, and whether its bulk kinds are paused (exit 1: one is)."""
    if ctx.invoked_subcommand is not None:
        return
    rep = _open()
    try:
        standings = rep.standings()
    except BackendUnavailable as exc:
        fail(str(exc))
    if as_json:
        rows = [asdict(s) | {"paused": s.paused} for s in standings]
        click.echo(json.dumps(rows, indent=2))
    else:
        _show(rep, standings)
    if any(s.paused for s in standings):
        raise SystemExit(1)


def _show(rep: Reputation, standings: list[Standing]) -> None:
    limits = rep.limits
    title = (
        f"thresholds {limits.thresholds}, window {views.duration(limits.window)}, "
        f"at least {limits.minimum} mails"
    )
    table = Table(title=title, title_justify="left", box=box.SIMPLE)
    for column in ("sender", "sent", "bounces", "bounce rate", "complaints", "complaint rate"):
        table.add_column(column, justify="left" if column == "sender" else "right")
    table.add_column("state")
    for s in standings:
        table.add_row(
            s.sender,
            str(s.sent),
            str(s.bounced),
            percent(s.rate("bounce")),
            str(s.complained),
            percent(s.rate("complaint")),
            state_of(s),
        )
    if not standings:
        click.echo("no sender counted in the window")
        return
    views.console().print(table)


@reputation.command(short_help="Lift a sender's pause by hand.")
@click.argument("sender")
@click.option("--by", default=None, help="Who lifts it (default: user@host).")
def resume(sender: str, by: str | None) -> None:
    """Lift SENDER's pause now: its bulk kinds send again, the mails that waited on the pause
    at once (made due in the schedule); the window's bounces and complaints are forgiven
    (recorded with who and when)."""
    settings, rep = _opened()
    who = by or f"{getpass.getuser()}@{socket.gethostname()}"
    try:
        known = sorted(s.sender for s in rep.standings())
        was = rep.pause_of(sender)
        if sender_of(sender) not in known and was is None:
            fail(f"{sender_of(sender)} is not counted; known: {', '.join(known) or 'none'}", USAGE)
        standing = rep.resume(sender, who)
        released = release_paused(settings, schedule_for(settings), sender)
    except BackendUnavailable as exc:
        fail(str(exc))
    if was is None or not was.paused:
        click.echo(f"{standing.sender} was not paused; its counts are forgiven all the same")
    click.echo(f"{standing.sender}: {state_of(standing)}")
    if released:
        click.echo(f"{released} paused mail{'' if released == 1 else 's'} released: due now")
