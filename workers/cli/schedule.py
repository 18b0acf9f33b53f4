"""``mailguard scheduled``: what waits in the schedule, by due hour and kind.

It needs the workers' shared ledger (``MAILGUARD_LEDGER_URL``, else the limiter's URL: a
``redis://``), where the schedule lives. Addresses are never printed.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import click

from mailer.errors import BackendUnavailable
from mailer.settings import Settings
from workers.cli import views
from workers.cli.errors import fail
from workers.cli.shared import shared_ledger_settings
from workers.waiting.parking import schedule_for
from workers.waiting.payload import Parked


def _settings() -> Settings:
    return shared_ledger_settings("schedule")


@click.command(short_help="How many mails wait in the schedule, by due hour and kind.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def scheduled(as_json: bool) -> None:
    """How many mails are parked, by due hour (UTC) and by kind; promoting; dead letters;
    watched (booked countdowns whose payload the watchdog keeps; counted by hour and kind too,
    by the time the watchdog would publish them)."""
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
        "watched": stats.watched,
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
    click.echo(f"watched {stats.watched} (booked mails held as countdowns, for the watchdog)")
    click.echo(f"earliest due {earliest}")
    for title, counts in (("due hour (UTC)", hours), ("kind", kinds)):
        click.echo(f"  {title:<20} mails")
        for name, count in sorted(counts.items()):
            click.echo(f"  {name:<20} {count:>5}")
    for mail_id in dead:
        click.echo(f"dead letter: {mail_id}")
