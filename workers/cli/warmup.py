"""``mailguard warmup``: each sender on a warm-up plan (``MAILGUARD_WARMUP``): the day it is on,
the day's allowance, the mails counted that day and those waiting for the next.

The counts are the workers' (the limiter's shared Redis, on its clock). Day 0: the sender has
not sent yet, or was idle ``MAILGUARD_WARMUP_IDLE`` and starts over at its next mail; an
allowance of ``-`` (``null`` in JSON): past the plan, warm.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import click
from rich import box
from rich.table import Table

from mailer.errors import BackendUnavailable
from mailer.factory import build_warmup
from mailer.records.warmup import Standing, Warmup
from workers.cli import views
from workers.cli.errors import USAGE, fail
from workers.cli.shared import env_settings, shared_limiter


@click.command(short_help="Each warm-up plan's day, allowance, used and waiting.")
@click.option("--json", "as_json", is_flag=True, help="Print the standings as JSON.")
def warmup(as_json: bool) -> None:
    """Each sender on a warm-up plan: its day (day 1 began at its first mail), the day's
    allowance, the mails counted that day, those waiting for the next day, and when it
    starts."""
    settings = env_settings()
    if settings.warmup is None:
        fail("MAILGUARD_WARMUP is off: no sender is on a plan; set it as the workers do", USAGE)
    limiter = shared_limiter(settings)
    plans = build_warmup(settings, limiter)
    if plans is None:  # not reached: the plans are on
        fail("MAILGUARD_WARMUP is off", USAGE)
    try:
        standings = plans.standings()
    except BackendUnavailable as exc:
        fail(str(exc))
    finally:
        limiter.close()
    if as_json:
        rows = [asdict(s) | {"plan": str(plans.plans[s.sender])} for s in standings]
        click.echo(json.dumps(rows, indent=2))
        return
    _show(plans, standings)


def _show(plans: Warmup, standings: list[Standing]) -> None:
    title = f"warm-up plans, a day of {views.duration(plans.day_length)}"
    table = Table(title=title, title_justify="left", box=box.SIMPLE)
    for column in ("sender", "plan", "day", "allowance", "used", "waiting"):
        table.add_column(column, justify="left" if column in ("sender", "plan") else "right")
    table.add_column("next day at")
    for s in standings:
        plan = str(plans.plans[s.sender])
        table.add_row(
            s.sender,
            plan if len(plan) <= 30 else plan[:29] + "…",
            str(s.day) if s.day else "0 (not started)",
            "-" if s.allowance is None else str(s.allowance),
            str(s.used),
            str(s.waiting),
            views.when(s.started + s.day * plans.day_length) if s.day else "-",
        )
    views.console().print(table)
