"""``mailguard demo``: the main job on embedded defaults (:mod:`workers.demo`)."""

from __future__ import annotations

import json
from typing import Any

import click

from mailer.errors import mask_url
from workers.cli import views
from workers.cli.errors import REFUSED, USAGE, error_line, fail
from workers.cli.shared import env_settings


@click.command(short_help="Play the main job on embedded defaults, in under a minute.")
@click.option(
    "--redis",
    "redis_url",
    metavar="URL",
    help="Broker, results and limiter on this Redis (the worker still runs in this process).",
)
@click.option(
    "--speed",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0.5, 10),
    help="Divide every duration (policy windows, tolerances, the script) by this.",
)
@click.option("--json", "as_json", is_flag=True, help="No live table: print the summary as JSON.")
def demo(redis_url: str | None, speed: float, as_json: bool) -> None:
    """Play the main job on embedded defaults: no Redis, nothing to configure.

    An in-process worker (threads pool, memory broker), the memory limiter and an SMTP server on
    127.0.0.1 capturing mail run a burst of mails to four fictitious recipients under the policy
    1/1s, 5/10s, 10/30s: a live table shows each mail sent, deferred to its booked slot, or
    dropped; a summary per recipient ends it (about 30 s). It runs on settings of its own,
    not MAILGUARD_* (only the worker's metrics port and log format follow them).
    Exit 0 when every mail settled within the policy, 1 if not, 130 on Ctrl-C (after the
    worker and the SMTP server stopped).
    """
    from workers import demo as story  # noqa: PLC0415 - Celery only for the commands that need it

    env_settings()  # importing the app reads MAILGUARD_*: a bad variable is one line, exit 2
    if redis_url and not redis_url.startswith(("redis://", "rediss://", "unix://")):
        fail(f"--redis {mask_url(redis_url)}: expected redis://, rediss:// or unix://", USAGE)
    console = views.console(markup=True)
    summary: dict[str, Any] = {}

    def done(run: story.Run) -> None:
        """Every mail settled: the final tables or the JSON summary, while the worker stops."""
        summary.update(run.summary())
        if as_json:
            click.echo(json.dumps(summary, indent=2))
        else:
            story.show_final(console, run)

    try:
        with story.quiet_logs():
            if as_json:
                story.run_demo(redis_url=redis_url, speed=speed, done=done)
            else:
                story.play_live(console, redis_url=redis_url, speed=speed, done=done)
    except story.DemoInterrupted:
        error_line("demo interrupted (Ctrl-C); the worker and the SMTP server are stopped")
        raise click.exceptions.Exit(130) from None
    except story.DemoError as exc:
        fail(str(exc))
    except ValueError as exc:
        fail(str(exc), USAGE)
    if summary["violations"] or not summary["complete"]:
        raise click.exceptions.Exit(REFUSED)
