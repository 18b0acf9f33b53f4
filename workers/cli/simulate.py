"""``mailguard simulate``: replay traffic through a policy on a virtual clock (mailer.simulate)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

import click

from mailer import Kinds, Policy
from mailer.durations import parse_duration
from mailer.errors import MailguardError
from mailer.providers import provider_finder
from workers.cli import views
from workers.cli.errors import USAGE, fail
from workers.cli.shared import env_settings

if TYPE_CHECKING:
    from mailer.simulate import Report


@click.command(short_help="Replay traffic through a policy on a virtual clock.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Trace to replay.")
@click.option(
    "--pattern",
    type=click.Choice(["day", "steady", "bursts", "abuse"]),
    help="Generated trace (default: day, a day of mixed traffic with one abused address).",
)
@click.option("--recipients", default=1000, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--hours", default=24.0, show_default=True, type=click.FloatRange(min=0.001))
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the pattern.")
@click.option(
    "--policy",
    "policy_text",
    help="Tiers, e.g. '1/60s, 5/1h' or scoped 'recipient: 1/60s; sender: 14/1s gcra' "
    "(default: configured).",
)
@click.option(
    "--against",
    "against_text",
    metavar="POLICY",
    help="A second policy to replay the same trace through: the two side by side; 'current' "
    "is the live policy the workers decide by now.",
)
@click.option(
    "--max-wait",
    "max_waits",
    multiple=True,
    metavar="KIND=DURATION",
    help="Override a kind's tolerance, e.g. code=2m (repeatable).",
)
@click.option(
    "--dns",
    is_flag=True,
    help="Find each recipient domain's provider from MX (MAILGUARD_DNS_SERVERS), as the "
    "workers do, for provider tiers (default: each domain is its own provider).",
)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write a PNG chart.")
@click.option("--top", default=5, show_default=True, type=click.IntRange(0, 100))
def simulate(
    *,
    csv_path: str | None,
    pattern: str | None,
    recipients: int,
    hours: float,
    seed: int,
    policy_text: str | None,
    against_text: str | None,
    max_waits: tuple[str, ...],
    dns: bool,
    plot_path: str | None,
    top: int,
) -> None:
    """Replay traffic through the real limiter on a virtual clock: what a policy would do.

    A CSV trace has rows time,recipient[,kind[,tenant]] (time in seconds from the start) or
    use a generated --pattern. With neither it runs the built-in example: a day of mixed
    traffic for 1000 recipients with one abused address. Scoped policies (domain, sender,
    tenant, provider; fixed and gcra tiers) replay as the workers would decide them; with
    --dns each domain's provider is found from MX as the workers find it (a provider google
    tier then binds every Workspace domain), without it each domain is its own provider.
    --against compares two policies on the same trace (--against current: with the live
    policy in force).
    """
    from mailer import simulate as sim  # noqa: PLC0415 - loaded only for this command

    settings = env_settings()
    if csv_path and pattern:
        fail("give --csv or --pattern, not both", USAGE)
    policy = settings.policy if policy_text is None else _policy(policy_text)
    against = None if against_text is None else _against(against_text)
    kinds = _with_waits(settings.kinds, max_waits)
    started = time.perf_counter()
    try:
        if csv_path:
            attempts = sim.read_csv_file(csv_path, kinds=kinds)
            source = f"trace {click.format_filename(csv_path)}"
        else:
            attempts = sim.generate(
                pattern or "day", recipients=recipients, duration=hours * 3600, seed=seed
            )
            source = f"pattern {pattern or 'day'}"
    except OSError as exc:
        fail(f"cannot read {csv_path}: {exc.strerror}", USAGE)
    except ValueError as exc:
        fail(str(exc), USAGE)
    finder = None
    if dns:  # the workers' resolver settings; answers kept in this process
        finder = provider_finder(
            "memory://", servers=settings.dns_servers, timeout=settings.dns_timeout
        )
    try:
        if against is None:
            report, other = sim.simulate(attempts, policy, kinds, providers=finder), None
        else:
            report, other = sim.compare(attempts, policy, against, kinds, providers=finder)
    except ValueError as exc:
        fail(str(exc), USAGE)
    elapsed = time.perf_counter() - started
    if other is None:
        views.show_report(report, source, elapsed, top)
    else:
        views.show_comparison(report, other, source, elapsed)
    if plot_path:
        _plot(report, plot_path)


def _policy(text: str, *, option: str = "--policy") -> Policy:
    try:
        return Policy.parse(text, name="recipient")
    except ValueError as exc:
        fail(f"{option}: {exc}", USAGE)


def _against(text: str) -> Policy:
    """``--against``: a policy, or ``current`` (the live one, :mod:`workers.cli.policy`)."""
    if text.strip().lower() == "current":
        from workers.cli.policy import live_policy  # noqa: PLC0415 - reads the ledger's Redis

        return live_policy()
    return _policy(text, option="--against")


def _plot(report: Report, path: str) -> None:
    from mailer.simulate import plot  # noqa: PLC0415 - loaded only for this command

    try:
        plot(report, path)
    except RuntimeError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror}")
    click.echo(f"plot written to {click.format_filename(path)}")


def _with_waits(kinds: Kinds, overrides: tuple[str, ...]) -> Kinds:
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep:
            fail(f"--max-wait {item!r}: expected KIND=DURATION such as code=2m", USAGE)
        try:
            kinds = kinds.with_kind(replace(kinds[name.strip()], max_wait=parse_duration(value)))
        except (ValueError, MailguardError) as exc:
            fail(f"--max-wait {item!r}: {exc}", USAGE)
    return kinds
