"""``mailguard reset``: forget a recipient's sends and bookings in the shared limiter."""

from __future__ import annotations

import click

from mailer.errors import BackendUnavailable
from workers.cli.errors import confirmed, fail
from workers.cli.shared import env_settings, live_settings, recipient_key, shared_limiter


@click.command(short_help="Forget a recipient's sends and bookings.")
@click.argument("address")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def reset(address: str, yes: bool) -> None:
    """Forget every send and booking of ADDRESS in the limiter (its budget starts afresh).

    Mails already deferred still wake at their time and then ask the limiter again.
    """
    settings = live_settings(env_settings())
    key = recipient_key(address)
    limiter = shared_limiter(settings)
    try:
        hashed = limiter.storage_key("recipient", key)
        question = f"Forget every send and booking of recipient {hashed}?"
        confirmed(question, yes=yes, refused="not reset")
        limiter.reset(key)
    except BackendUnavailable as exc:
        fail(str(exc))
    finally:
        limiter.close()
    click.echo(f"reset {hashed}")
