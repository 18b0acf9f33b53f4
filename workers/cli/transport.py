"""``mailguard transport``: the transport's hold (the relay refuses our own side: credentials,
certificate, sender; :mod:`mailer.records.holds.transport`): ``status`` shows it, ``resume``
lifts it at once. Read from the workers' shared holds (the limiter's Redis)."""

from __future__ import annotations

import json

import click

from mailer.errors import BackendUnavailable
from mailer.factory import build_holds
from mailer.guard import iso
from mailer.records.holds import Hold, TransportHold
from mailer.settings import Settings
from workers.cli.errors import USAGE, fail
from workers.cli.shared import env_settings, shared_limiter_url


def held_problem(settings: Settings) -> str:
    """For ``mailguard health``: what is wrong when the transport is held (its cause and the
    way out), empty when it is not, when holds are off, or live in each worker (memory)."""
    if settings.throttle_hold is None or settings.limiter_url.startswith("memory:"):
        return ""
    try:
        held = build_holds(settings).transport.held()
    except (BackendUnavailable, ValueError) as exc:
        return f"the transport's hold cannot be read: {exc}"
    if not held:
        return ""
    hold = min(held, key=lambda h: h.since)
    more = f" (and {len(held) - 1} more)" if len(held) > 1 else ""
    return (
        f"the transport is held since {iso(hold.since)}: the relay refuses our own side "
        f"({hold.cause}){more}; fix the relay settings and restart the workers, or run "
        "'mailguard transport resume'"
    )


def _transport_hold() -> TransportHold:
    """The workers' shared transport hold (exit 1 when it cannot be shared or read)."""
    settings = env_settings()
    shared_limiter_url(settings)
    if settings.throttle_hold is None:
        fail("holds are off (MAILGUARD_THROTTLE_HOLD=off): the transport is never held")
    try:
        return build_holds(settings).transport
    except ValueError as exc:
        fail(str(exc), USAGE)


def _shown(hold: Hold) -> dict[str, object]:
    return {
        "since": iso(hold.since),
        "next_probe": iso(hold.until),
        "probes": hold.level,
        "cause": hold.cause,
    }


@click.group(short_help="The transport's hold: status, resume.")
def transport() -> None:
    """The transport's hold: when the relay refuses our own side (a wrong password, a
    certificate not trusted, our sender refused), no worker sends through it; one mail probes
    it on a doubling backoff, and the relay accepting a mail lifts the hold."""


@transport.command(short_help="Whether the transport is held, since when and why.")
@click.option("--json", "as_json", is_flag=True, help="Print the hold as JSON.")
def status(as_json: bool) -> None:
    """Whether the transport is held (the relay's hold, and each refused sender's): since
    when, the next probe, the refusal (exit 0)."""
    try:
        held = _transport_hold().held()
    except BackendUnavailable as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps({"held": bool(held), "holds": [_shown(h) for h in held]}))
    elif not held:
        click.echo("transport not held")
    for hold in held if not as_json else []:
        shown = _shown(hold)
        click.echo(
            f"transport held since {shown['since']} ({hold.cause}); {hold.level} probes refused, "
            f"the next at {shown['next_probe']}"
        )


@transport.command(short_help="Lift the transport's hold at once.")
def resume() -> None:
    """Lift the transport's holds at once (after fixing the relay settings): mails met from
    now on go to the relay; those booked after the hold go at their booked time."""
    try:
        lifted = _transport_hold().lift_all()
    except BackendUnavailable as exc:
        fail(str(exc))
    click.echo("transport resumed" if lifted else "transport was not held")
