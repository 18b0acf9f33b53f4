"""``mailguard suppress / unsuppress / suppressed``: the suppression list by hand.

Addresses whose mailbox is gone or who complained (hard bounces in SMTP replies and, with
``workers.django_tracking`` or :func:`mailer.suppression.record_event`, ESP webhooks suppress
them by themselves; an operator adds one, or lifts one). ``suppressed`` says why (SMTP reply,
bounce, complaint, rejected, by hand) and since when, and the senders whose bulk kinds the
address unsubscribed from (one-click unsubscribe: :mod:`mailer.unsubscribe`); ``unsuppress``
lifts those too. The list lives where the ledger
lives (``MAILGUARD_LEDGER_URL``, else the limiter's URL): a shared ``redis://``. Addresses are
never printed: a recipient appears as the keyed hash of its entry.
"""

from __future__ import annotations

import json

import click

from mailer.durations import parse_duration
from mailer.errors import BackendUnavailable, InvalidAddress
from mailer.factory import build_suppressions
from mailer.guard import iso
from mailer.records.suppression import FOREVER, SOURCE_WORDS, Suppression, Suppressions
from workers.cli.errors import USAGE, confirmed, fail
from workers.cli.shared import shared_ledger_settings


def _store() -> Suppressions:
    return build_suppressions(shared_ledger_settings("suppression list"))


def _key(store: Suppressions, address: str) -> str:
    try:
        return store.key_of(address)
    except InvalidAddress as exc:
        fail(f"bad address: {exc}", USAGE)


def describe(entry: Suppression) -> str:
    """``until ... since ...: why (cause)``; ``for ever (until lifted)`` for a complaint's."""
    until = "for ever (until lifted)" if entry.forever else f"until {iso(entry.until)}"
    return f"{until} since {iso(entry.since)}: {SOURCE_WORDS[entry.source]} ({entry.cause})"


@click.command(short_help="Say whether an address is suppressed, why and since when.")
@click.argument("address")
@click.option("--json", "as_json", is_flag=True, help="Print the entry as JSON.")
def suppressed(address: str, as_json: bool) -> None:
    """Whether ADDRESS is suppressed, since and until when, and why: an SMTP reply, a bounce
    or complaint reported by a webhook, rejected by the ESP, or by hand (exit 1: it is not)."""
    store = _store()
    key = _key(store, address)
    try:
        entry = store.suppressed(address)
        scoped = store.unsubscriptions(address)
    except BackendUnavailable as exc:
        fail(str(exc))
    if as_json:
        shown = (
            None if entry is None else vars(entry) | {"forever": entry.forever, "recipient": key}
        )
        if scoped:
            shown = (shown or {"recipient": key}) | {"unsubscribed": [vars(e) for e in scoped]}
        click.echo(json.dumps(shown, indent=2))
    else:
        if entry is not None:
            click.echo(f"{key} suppressed {describe(entry)}")
        for one in scoped:  # one-click unsubscribes: that sender's bulk kinds only
            click.echo(f"{key} unsubscribed since {iso(one.since)}: {one.cause}")
    if entry is None and not scoped:
        if not as_json:
            click.echo(f"{key} is not suppressed")
        raise SystemExit(1)


@click.command(short_help="Suppress an address by hand (a complaint, a bounce webhook).")
@click.argument("address")
@click.option("--for", "duration", default="30d", show_default=True, help="How long, or 'forever'.")
@click.option("--reason", default="suppressed by hand", show_default=True, help="Why.")
def suppress(address: str, duration: str, reason: str) -> None:
    """Suppress ADDRESS: mails to it end dropped/suppressed without contacting the server."""
    try:
        seconds = FOREVER if duration.strip().lower() == "forever" else parse_duration(duration)
    except ValueError as exc:
        fail(f"--for: {exc}", USAGE)
    if seconds <= 0:
        fail("--for must be longer than 0 s", USAGE)
    store = _store()
    key = _key(store, address)
    try:
        entry = store.suppress(address, seconds=seconds, cause=reason, source="hand")
    except BackendUnavailable as exc:
        fail(str(exc))
    click.echo(f"{key} suppressed {describe(entry)}")


@click.command(short_help="Lift an address's suppression.")
@click.argument("address")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def unsuppress(address: str, yes: bool) -> None:
    """Lift the suppression of ADDRESS: the next mail to it goes to the server again."""
    store = _store()
    key = _key(store, address)
    confirmed(f"Lift the suppression of recipient {key}?", yes=yes, refused="not lifted")
    try:
        lifted = store.lift(address)
    except BackendUnavailable as exc:
        fail(str(exc))
    if not lifted:
        fail(f"{key} was not suppressed")
    click.echo(f"{key} no longer suppressed")
