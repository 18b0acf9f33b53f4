"""``mailguard policy show | set | history``: the live policy, changed without a restart.

The policy (``MAILGUARD_POLICY``'s form) and kinds' tolerances and shares are stored with a
version number where the ledger lives (:mod:`mailer.records.policy`); every worker process
takes a new version within a second. With none stored, the environment's ``MAILGUARD_POLICY``
holds. ``set`` refuses in one line (exit 2), before storing, a policy that does not parse or
that would move the recipient scope's keys; it replays a generated day of traffic through the
candidate and the policy in force, shows the two side by side, and asks before storing.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict

import click

from mailer import Limiter, Policy
from mailer.errors import BackendUnavailable
from mailer.factory import build_policies, check_same_keys
from mailer.records.policy import KIND_FIELDS, LivePolicies, LivePolicy
from mailer.settings import Settings
from workers.cli import views
from workers.cli.errors import USAGE, confirmed, fail
from workers.cli.shared import shared_ledger_settings


def _open() -> tuple[Settings, LivePolicies]:
    settings = shared_ledger_settings("live policy")
    return settings, build_policies(settings)


def in_force(
    settings: Settings, policies: LivePolicies, *, lenient: bool = False
) -> tuple[Settings, LivePolicy | None]:
    """The settings the workers decide by now (the stored version applied to ``settings``, or
    ``settings`` themselves when none is stored) and that version. Exit 1 when Redis is down
    or the stored version does not read (the workers keep their last good one: see their
    log); ``lenient`` (``set``, which replaces it) says so on stderr and goes on with
    ``settings``."""
    try:
        live = policies.current()
        return (settings if live is None else live.apply(settings)), live
    except BackendUnavailable as exc:
        fail(str(exc))
    except ValueError as exc:
        if not lenient:
            fail(f"the stored live policy does not read ({exc}); set a good one")
        click.echo(f"mailguard: the stored live policy does not read ({exc})", err=True)
        return settings, None


def live_policy() -> Policy:
    """The policy the workers decide by now (``simulate --against current``)."""
    settings, policies = _open()
    return in_force(settings, policies)[0].policy


@click.group(short_help="Show, set or list the live policy (no restart).")
def policy() -> None:
    """The live policy: stored with a version where the ledger lives, taken by every worker
    within a second. The environment's MAILGUARD_POLICY holds while none is stored."""


@policy.command(short_help="The policy the workers decide by now.")
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
def show(as_json: bool) -> None:
    """The policy in force: its version, when it was set, its tiers and kinds' changes."""
    settings, policies = _open()
    applied, live = in_force(settings, policies)
    if as_json:
        shown = {"version": 0, "policy": str(settings.policy), "source": "environment"}
        if live is not None:
            shown = asdict(live) | {"source": "live"}
        click.echo(json.dumps(shown, indent=2))
        return
    if live is None:
        click.echo(f"version 0 (none stored): the environment's MAILGUARD_POLICY {settings.policy}")
        return
    click.echo(f"version {live.version}, set {views.when(live.set_at)}: {live.describe()}")
    click.echo(f"tiers    {applied.policy}")
    for name in sorted(live.kinds):
        kind = applied.kinds[name]
        click.echo(
            f"kind     {name}: max_wait {views.duration(kind.max_wait)}, share {kind.share:g}"
        )


@policy.command(short_help="List every stored version.")
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
def history(as_json: bool) -> None:
    """Every stored version, oldest first, with when it was set."""
    _, policies = _open()
    try:
        versions = policies.history()
    except BackendUnavailable as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps([_row(v) for v in versions], indent=2))
        return
    if not versions:
        click.echo("no live policy stored: the environment's MAILGUARD_POLICY holds")
    for v in versions:
        if isinstance(v, LivePolicy):
            click.echo(f"{v.version:>4}  {views.when(v.set_at)}  {v.describe()}")
        else:
            click.echo(f"{v[0]:>4}  (does not read: {v[1]})")


def _row(v: LivePolicy | tuple[int, str]) -> dict[str, object]:
    """One version as JSON."""
    return asdict(v) if isinstance(v, LivePolicy) else {"version": v[0], "error": v[1]}


def _changes(max_waits: tuple[str, ...], shares: tuple[str, ...]) -> dict[str, dict[str, str]]:
    changes: dict[str, dict[str, str]] = {}
    for field, items in zip(KIND_FIELDS, (max_waits, shares), strict=True):
        option = "--" + field.replace("_", "-")
        for item in items:
            name, sep, value = item.partition("=")
            if not sep or not name.strip() or not value.strip():
                fail(f"{option} {item!r}: expected KIND=VALUE such as code=2m", USAGE)
            changes.setdefault(name.strip(), {})[field] = value.strip()
    return changes


def _applied(settings: Settings, candidate: LivePolicy) -> Settings:
    """The candidate applied to ``settings``, or one line (exit 2): it does not parse. Checked
    before anything is read, so a bad policy is refused even with Redis down."""
    try:
        return candidate.apply(settings)
    except ValueError as exc:
        fail(f"policy set: {exc}", USAGE)


def _check_keys(settings: Settings, now: Settings, applied: Settings) -> None:
    """One line (exit 2) when the candidate keeps the recipient scope under other keys than
    the policy in force, or cannot be served by the limiter's storage."""
    try:
        old, new = (
            Limiter.from_url(
                settings.limiter_url, s.policy, secret=settings.secret, tz=settings.timezone
            )
            for s in (now, applied)
        )
        try:
            check_same_keys(old, new)
        finally:
            old.close()
            new.close()
    except ValueError as exc:
        fail(f"policy set: {exc}", USAGE)


def _compare(now: Settings, applied: Settings, version: int) -> None:
    """A generated day of traffic through the candidate (A) and the policy in force (B)."""
    from mailer import simulate as sim  # noqa: PLC0415 - loaded only for this command

    started = time.perf_counter()
    attempts = sim.generate("day", recipients=1000, duration=86_400, seed=0)
    report, other = sim.compare(attempts, applied.policy, now.policy, applied.kinds)
    source = f"pattern day; A: the candidate, B: version {version} in force"
    views.show_comparison(report, other, source, time.perf_counter() - started)


@policy.command(name="set", short_help="Store a new version: every worker takes it within 1 s.")
@click.argument("policy_text", metavar="POLICY")
@click.option(
    "--max-wait",
    "max_waits",
    multiple=True,
    metavar="KIND=DURATION",
    help="A kind's tolerance, e.g. code=2m (repeatable).",
)
@click.option(
    "--share",
    "shares",
    multiple=True,
    metavar="KIND=SHARE",
    help="A kind's share, e.g. notice=0.5.",
)
@click.option("--yes", "-y", is_flag=True, help="Store without showing the comparison or asking.")
def set_policy(
    policy_text: str, max_waits: tuple[str, ...], shares: tuple[str, ...], yes: bool
) -> None:
    """Store POLICY (as MAILGUARD_POLICY is written, e.g. '1/60s, 5/1h' or 'recipient: 1/60s;
    sender: 14/1s gcra') as the next version, after showing how it compares with the policy in
    force on a generated day of traffic and asking. Refused before storing when it does not
    parse, or when it would keep the recipient scope under other keys (a recipient-only policy
    to a scoped one or back: counts and bookings would be lost)."""
    settings, policies = _open()
    candidate = LivePolicy(policy_text, _changes(max_waits, shares))
    applied = _applied(settings, candidate)
    now, live = in_force(settings, policies, lenient=True)
    _check_keys(settings, now, applied)
    version = 0 if live is None else live.version
    if not yes:
        _compare(now, applied, version)
        confirmed(f"Store it as the next version (now {version})?", yes=False, refused="not stored")
    try:
        stored = policies.set(candidate)
    except BackendUnavailable as exc:
        fail(str(exc))
    click.echo(
        f"policy version {stored.version} stored: {stored.describe()} "
        "(every worker takes it within 1 s)"
    )
