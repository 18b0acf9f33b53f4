"""The ``mailguard`` command group, with every command added to it."""

from __future__ import annotations

import click

from workers.cli import (
    cancel,
    demo,
    health,
    outcome,
    policy,
    reputation,
    reset,
    retry,
    schedule,
    send,
    settings,
    simulate,
    status,
    suppression,
    transport,
    warmup,
    worker,
)
from workers.cli.errors import OneLineErrors


@click.group(
    name="mailguard", cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def main(debug: bool) -> None:
    """mailguard: a Celery guard for outbound mail, exact rate limits per recipient.

    Configured by MAILGUARD_* environment variables, as the worker is.
    """


for command in (
    worker.worker,
    demo.demo,
    send.send,
    outcome.outcome,
    status.status,
    reset.reset,
    simulate.simulate,
    suppression.suppress,
    suppression.unsuppress,
    suppression.suppressed,
    cancel.cancel,
    schedule.scheduled,
    policy.policy,
    reputation.reputation,
    health.health,
    settings.settings,
    retry.retry,
    transport.transport,
    warmup.warmup,
):
    main.add_command(command)
