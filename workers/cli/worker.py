"""``mailguard worker``: a Celery worker with mailguard's app."""

from __future__ import annotations

import click

from workers.cli.shared import env_settings, refuse_problems


@click.command(
    short_help="Run a Celery worker with mailguard's app.",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def worker(celery_args: tuple[str, ...]) -> None:
    """Run a Celery worker with mailguard's app: mailguard worker [celery worker options].

    Options go to `celery worker` as they are, e.g. --concurrency 4 --pool threads; see
    `mailguard worker --help-celery`. With a memory:// limiter use --pool threads or solo.
    """
    if celery_args and celery_args[0] in ("-h", "--help"):
        click.echo(click.get_current_context().get_help())
        return
    args = ["--help" if a == "--help-celery" else a for a in celery_args]
    refuse_problems(env_settings())
    from workers.app import app  # noqa: PLC0415 - Celery only for the commands that need it

    app.worker_main(["worker", *args])
