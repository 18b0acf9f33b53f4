"""``mailguard status``: a recipient's budget per tier, the sender's hold, or the dead letters.

Reads the shared limiter, holds and ledger without consuming anything."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

import click

from mailer.errors import BackendUnavailable
from mailer.factory import build_holds, build_ledger
from mailer.limits import check_tenant, single_key
from mailer.records.holds import Hold, Pace
from mailer.settings import Settings
from workers.cli import views
from workers.cli.budget import budget_report, scoped_report
from workers.cli.errors import USAGE, fail
from workers.cli.shared import (
    env_settings,
    live_settings,
    recipient_key,
    refuse_problems,
    shared_limiter,
    shared_limiter_url,
)


@click.command(short_help="Show a recipient's budget per tier, or the dead letters.")
@click.argument("address", required=False)
@click.option(
    "--sender", is_flag=True, help="The sender's hold, and its scope's budget (a scoped policy)."
)
@click.option("--tenant", metavar="NAME", help="A tenant's budget (a scoped policy).")
@click.option(
    "--provider", metavar="NAME", help="A mailbox provider's budget (a policy with provider tiers)."
)
@click.option("--dead-letters", is_flag=True, help="List quarantined (poison) mails instead.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(  # noqa: PLR0917 - one argument per option
    address: str | None,
    sender: bool,
    tenant: str | None,
    provider: str | None,
    dead_letters: bool,
    as_json: bool,
) -> None:
    """ADDRESS's budget: per tier used/limit, when the next mail may go, booked sends.

    Reads the configured limiter (MAILGUARD_LIMITER_URL, a shared redis://) without
    consuming anything. The address is shown only as the hash the outcomes carry.
    Under a scoped policy, every scope the mail is counted in (recipient, domain, sender, its
    provider's, and with --tenant NAME that tenant); --sender, --tenant NAME and --provider
    NAME (google, microsoft, a registered domain) without ADDRESS show those shared scopes
    alone. --sender also shows a hold in force (no worker sends until it ends),
    under any policy, and why: the reply or the evidence (temporary failures of several
    recipients) that started it, and whether its length was stated by the server. With
    --dead-letters (and nothing else): the mails quarantined as poison, newest first.
    """
    settings = live_settings(env_settings())
    if dead_letters:
        if address is not None or sender or tenant is not None or provider is not None:
            fail("give either ADDRESS, --sender, --tenant, --provider or --dead-letters", USAGE)
        _show_dead_letters(settings, as_json)
        return
    if provider is not None and not settings.policy.provider_scoped:
        fail(f"--provider: policy {settings.policy} has no provider tiers", USAGE)
    if address is None and not sender and tenant is None and provider is None:
        fail("missing ADDRESS (or --sender, --tenant NAME, --provider NAME, --dead-letters)", USAGE)
    key = None if address is None else recipient_key(address)
    hold = _sender_hold(settings) if sender else None
    pace = _sender_pace(settings) if sender else None
    providers = _provider_holds(settings) if sender else None
    if not single_key(settings.policy):  # a report of every scope
        _scoped_status(
            settings,
            key,
            asked=(tenant, provider.strip().lower() if provider else None),
            sender=sender,
            as_json=as_json,
            hold=(hold, pace, providers),
        )
        return
    if key is None and sender:
        _show_hold({"scope": "sender"}, hold, pace, providers, as_json=as_json)
        return
    if key is None:
        fail(f"policy {settings.policy} has no sender or tenant scope: give an ADDRESS", USAGE)
    limiter = shared_limiter(settings)
    try:
        report = budget_report(limiter, settings, key)
    except BackendUnavailable as exc:
        fail(str(exc))
    finally:
        limiter.close()
    if sender:
        _show_hold(report, hold, pace, providers, as_json=as_json, show=views.show_status)
    elif as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        views.show_status(report)


def _sender_hold(settings: Settings) -> dict[str, Any] | None:
    """The sender's hold in force (until, since, level, cause), or None."""

    shared_limiter_url(settings)
    try:
        hold = build_holds(settings).sender()
    except ValueError as exc:
        fail(str(exc), USAGE)
    except BackendUnavailable as exc:
        fail(str(exc))
    return None if hold is None else _stored(hold)


def _sender_pace(settings: Settings) -> dict[str, Any] | None:
    """The sender's pace after a hold in force (its learned rate now, in mails/s), or None."""
    try:
        pace = build_holds(settings).pace
        current = pace.current()
        rate = pace.rate_now()
    except BackendUnavailable as exc:
        fail(str(exc))
    return None if current is None else _stored(current) | {"rate_now": rate}


def _provider_holds(settings: Settings) -> dict[str, dict[str, Any]]:
    """Each provider's hold in force (``MAILGUARD_PROVIDER_HOLDS``), by provider name."""
    try:
        holds = build_holds(settings)
        found = holds.provider_holds() if holds.providers is not None else {}
    except BackendUnavailable as exc:
        fail(str(exc))
    return {name: _stored(hold) for name, hold in sorted(found.items())}


def _stored(value: Hold | Pace) -> dict[str, Any]:
    """A hold's or a pace's stored fields (not ``written``, which a put or slow-down answers)."""
    fields = asdict(value)
    del fields["written"]
    return fields


def _show_pace(pace: dict[str, Any] | None) -> None:
    if pace is None:
        return  # no slow start in force: the hold line says it all
    bound = f", up to the sender tier's {pace['cap']:.3g}/s" if pace["cap"] else ""
    click.echo(
        f"sender paced after a hold: {pace['rate_now']:.3g} mails/s now (learned: "
        f"+{pace['step']:.3g}/s each second without a throttling reply, halved "
        f"{pace['level']} times{bound})"
    )


def _show_hold(
    report: dict[str, Any],
    hold: dict[str, Any] | None,
    pace: dict[str, Any] | None = None,
    providers: dict[str, dict[str, Any]] | None = None,
    *,
    as_json: bool,
    show: Callable[[Mapping[str, Any]], None] | None = None,
) -> None:
    """``report`` (shown by ``show``, if any), the sender's hold line, its pace's and one line
    per provider held; JSON: one object (``providers``: name -> hold)."""
    if as_json:
        held = {"hold": hold, "pace": pace, "providers": providers or {}}
        click.echo(json.dumps(report | held, indent=2))
        return
    if show is not None:
        show(report)
    if hold is None:
        click.echo("sender: no hold")
    else:
        length = views.duration(hold["until"] - hold["since"])
        left = views.duration(max(hold["until"] - time.time(), 0.0))
        why = (
            f"{length} stated by the server"
            if hold["stated"]
            else f"{length}: the first length, doubled {hold['level']} times while the "
            "throttling continued"
        )
        click.echo(
            f"sender held until {views.when(hold['until'])} ({hold['cause']}), "
            f"{left} left, level {hold['level']}; {why}"
        )
    _show_pace(pace)
    for name, at in (providers or {}).items():
        left = views.duration(max(at["until"] - time.time(), 0.0))
        click.echo(
            f"sender held at provider {name} until {views.when(at['until'])} "
            f"({at['cause']}), {left} left, level {at['level']}: its mail alone waits"
        )


def _scoped_status(
    settings: Settings,
    key: str | None,
    *,
    asked: tuple[str | None, str | None],
    sender: bool,
    as_json: bool,
    hold: tuple[Any, ...] = (None, None, None),
) -> None:
    """``asked``: the tenant and the provider whose scopes to show (None: not asked)."""
    tenant, provider = asked
    try:
        check_tenant(tenant)
    except ValueError as exc:
        fail(f"--tenant: {exc}", USAGE)
    limiter = shared_limiter(settings)
    try:
        report = scoped_report(limiter, key, tenant=tenant, sender=sender, provider=provider)
    except BackendUnavailable as exc:
        fail(str(exc))
    finally:
        limiter.close()
    if sender:
        _show_hold(report, *hold, as_json=as_json, show=views.show_scoped_status)
    elif as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        views.show_scoped_status(report)


def _show_dead_letters(settings: Settings, as_json: bool) -> None:
    refuse_problems(settings)
    if settings.effective_ledger_url.startswith("memory:"):
        fail("the ledger is memory://: only its own worker process can see it; set a redis:// URL")

    try:
        letters = [o.as_dict() for o in build_ledger(settings).dead_letters(limit=1000)]
    except BackendUnavailable as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps(letters, indent=2))
    else:
        views.show_dead_letters(letters)
