"""The ``mailguard`` command: run a worker, send, inspect and reset a recipient, simulate a policy.

Configured by the same ``MAILGUARD_*`` variables as the worker (see :mod:`mailer.settings`).
Exit codes: 0 done, 1 refused or not found (a dropped mail, an unknown mail id, a server that
cannot be reached), 2 bad usage or input (a malformed address, an unknown kind, a bad policy, a
broken CSV line). Every error is one line on stderr; ``--debug`` shows the traceback instead.
Addresses are never printed: a recipient is shown as its keyed hash, as in the outcomes.

Celery is imported only by the commands that need it (``worker``, ``send``, ``outcome``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

import click

from mailer.durations import parse_duration
from mailer.errors import (
    BackendUnavailable,
    InvalidAddress,
    InvalidMessage,
    MailguardError,
    mask_url,
)
from mailer.limits.limiter import Limiter
from mailer.limits.policy import Policy
from mailer.mail.address import normalise_address
from mailer.mail.kinds import Kinds, render
from mailer.settings import Settings
from workers import cli_schedule, cli_suppression, views
from workers.budget import budget_report, scoped_report
from workers.cli_errors import REFUSED, USAGE, OneLineErrors, error_line, fail
from workers.outcomes import read_state

if TYPE_CHECKING:
    from mailer.simulate import Report


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ValueError as exc:
        fail(str(exc), USAGE)


@click.group(
    name="mailguard", cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def main(debug: bool) -> None:
    """mailguard: a Celery guard for outbound mail, exact rate limits per recipient.

    Configured by MAILGUARD_* environment variables, as the worker is.
    """


@main.command(
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
    refuse_problems(_settings())
    from workers.app import app  # noqa: PLC0415 - Celery only for the commands that need it

    app.worker_main(["worker", *args])


@main.command(short_help="Play the main job on embedded defaults, in under a minute.")
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

    _settings()  # importing the app reads MAILGUARD_*: a bad variable is one line, exit 2
    if redis_url and not redis_url.startswith(("redis://", "rediss://", "unix://")):
        fail(f"--redis {mask_url(redis_url)}: expected redis://, rediss:// or unix://", USAGE)
    console = views.console()
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


@main.command(short_help="Enqueue a mail; print its mail id (--wait: its outcome).")
@click.argument("address")
@click.option("--subject", help="Subject (else the kind's template).")
@click.option("--body", help="Text body (else the kind's template).")
@click.option("--kind", default="default", show_default=True, help="Kind of mail.")
@click.option("--context", "context_json", help='Template variables as JSON: \'{"code": "1"}\'.')
@click.option("--mail-id", help="Mail id (default: a new task id); one mail per id, ever.")
@click.option("--wait", is_flag=True, help="Wait for the outcome and print it.")
@click.option(
    "--timeout",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="With --wait: give up waiting after this many seconds (the mail still goes).",
)
def send(
    *,
    address: str,
    subject: str | None,
    body: str | None,
    kind: str,
    context_json: str | None,
    mail_id: str | None,
    wait: bool,
    timeout: float,
) -> None:
    """Enqueue a mail to ADDRESS and print its mail id.

    The input is checked first (address, kind, templates), so a mail the worker would drop
    as invalid is refused here. Exit 1 if --wait ends with the mail dropped or failed.
    """
    settings = _settings()
    _recipient(address)
    context = _context(context_json)
    try:
        render(settings.kinds[kind], subject, body, None, context)
    except InvalidMessage as exc:
        fail(str(exc), USAGE)
    if settings.broker_url.startswith("memory:"):
        fail(
            "MAILGUARD_BROKER_URL is memory://, which no worker outside this process can read; "
            "set it to the workers' broker (redis://...)",
        )
    app, send_mail = _celery()
    options: dict[str, Any] = {"task_id": mail_id} if mail_id else {}
    kwargs = {"subject": subject, "body": body, "kind": kind, "context": context}
    try:
        result = send_mail.apply_async(args=[address], kwargs=kwargs, retry=False, **options)
    except Exception as exc:
        fail(f"cannot enqueue on the broker {mask_url(settings.broker_url)}: {exc}")
    click.echo(result.id)
    if wait:
        _wait(app, result.id, timeout)


@main.command(short_help="Show a mail's state and outcome.")
@click.argument("mail_id")
@click.option("--json", "as_json", is_flag=True, help="Print state and outcome as JSON.")
def outcome(mail_id: str, as_json: bool) -> None:
    """The state and outcome of MAIL_ID from the result backend (exit 1: unknown id)."""
    app, _ = _celery()
    state, meta = _state(app, mail_id)
    if state == "PENDING":
        fail(f"no outcome for mail id {mail_id!r}: unknown, expired, or not yet taken by a worker")
    _show_outcome(mail_id, state, meta, as_json)


@main.command(short_help="Show a recipient's budget per tier, or the dead letters.")
@click.argument("address", required=False)
@click.option(
    "--sender", is_flag=True, help="The sender's hold, and its scope's budget (a scoped policy)."
)
@click.option("--tenant", metavar="NAME", help="A tenant's budget (a scoped policy).")
@click.option("--dead-letters", is_flag=True, help="List quarantined (poison) mails instead.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(
    address: str | None, sender: bool, tenant: str | None, dead_letters: bool, as_json: bool
) -> None:
    """ADDRESS's budget: per tier used/limit, when the next mail may go, booked sends.

    Reads the configured limiter (MAILGUARD_LIMITER_URL, a shared redis://) without
    consuming anything. The address is shown only as the hash the outcomes carry.
    Under a scoped policy, every scope the mail is counted in (recipient, domain, sender, and
    with --tenant NAME that tenant); --sender and --tenant NAME without ADDRESS show those
    shared scopes alone. --sender also shows a hold in force after a throttling reply (no
    worker sends until it ends), under any policy. With --dead-letters (and nothing else): the
    mails quarantined as poison, newest first.
    """
    settings = _settings()
    if dead_letters:
        if address is not None or sender or tenant is not None:
            fail("give either ADDRESS, --sender, --tenant or --dead-letters", USAGE)
        _show_dead_letters(settings, as_json)
        return
    if address is None and not sender and tenant is None:
        fail("missing ADDRESS (or --sender, --tenant NAME, --dead-letters)", USAGE)
    key = None if address is None else _recipient(address)
    hold = _sender_hold(settings) if sender else None
    if _is_scoped(settings.policy):
        _scoped_status(settings, key, tenant=tenant, sender=sender, as_json=as_json, hold=hold)
        return
    if key is None and sender:
        _show_hold({"scope": "sender"}, hold, as_json=as_json)
        return
    if key is None:
        fail(f"policy {settings.policy} has no sender or tenant scope: give an ADDRESS", USAGE)
    limiter = _shared_limiter(settings)
    try:
        report = budget_report(limiter, settings, key)
    except BackendUnavailable as exc:
        fail(str(exc))
    finally:
        limiter.close()
    if sender:
        _show_hold(report, hold, as_json=as_json, show=views.show_status)
    elif as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        views.show_status(report)


def _sender_hold(settings: Settings) -> dict[str, Any] | None:
    """The sender's hold in force (until, since, level, cause), or None."""
    from mailer.factory import build_holds  # noqa: PLC0415

    _shared_limiter_url(settings)
    try:
        hold = build_holds(settings).sender()
    except ValueError as exc:
        fail(str(exc), USAGE)
    except BackendUnavailable as exc:
        fail(str(exc))
    return None if hold is None else asdict(hold)


def _show_hold(
    report: dict[str, Any],
    hold: dict[str, Any] | None,
    *,
    as_json: bool,
    show: Callable[[Mapping[str, Any]], None] | None = None,
) -> None:
    """``report`` (shown by ``show``, if any) and the sender's hold line; JSON: one object."""
    if as_json:
        click.echo(json.dumps(report | {"hold": hold}, indent=2))
        return
    if show is not None:
        show(report)
    if hold is None:
        click.echo("sender: no hold")
    else:
        click.echo(
            f"sender held until {views.when(hold['until'])} ({hold['cause']}), "
            f"{max(hold['until'] - time.time(), 0.0):.0f} s left, level {hold['level']}"
        )


def _is_scoped(policy: Policy) -> bool:
    """Whether the workers decide ``policy`` with the scoped limiter (as the guard builds it)."""
    return policy.scoped or any(t.kind != "sliding" for t in policy.tiers)


def _scoped_status(
    settings: Settings,
    key: str | None,
    *,
    tenant: str | None,
    sender: bool,
    as_json: bool,
    hold: dict[str, Any] | None = None,
) -> None:
    from mailer.limits.checks import check_tenant  # noqa: PLC0415

    try:
        check_tenant(tenant)
    except ValueError as exc:
        fail(f"--tenant: {exc}", USAGE)
    _shared_limiter_url(settings)
    try:
        limiter = Limiter.from_url(
            settings.limiter_url, settings.policy, secret=settings.secret, tz=settings.timezone
        )
    except ValueError as exc:
        fail(f"MAILGUARD_LIMITER_URL: {exc}", USAGE)
    try:
        report = scoped_report(limiter, key, tenant=tenant, sender=sender)
    except BackendUnavailable as exc:
        fail(str(exc))
    finally:
        limiter.close()
    if sender:
        _show_hold(report, hold, as_json=as_json, show=views.show_scoped_status)
    elif as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        views.show_scoped_status(report)


def _show_dead_letters(settings: Settings, as_json: bool) -> None:
    refuse_problems(settings)
    if settings.effective_ledger_url.startswith("memory:"):
        fail("the ledger is memory://: only its own worker process can see it; set a redis:// URL")
    from mailer.factory import build_ledger  # noqa: PLC0415 - Redis only when needed

    try:
        letters = [o.as_dict() for o in build_ledger(settings).dead_letters(limit=1000)]
    except BackendUnavailable as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps(letters, indent=2))
    else:
        views.show_dead_letters(letters)


@main.command(short_help="Forget a recipient's sends and bookings.")
@click.argument("address")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def reset(address: str, yes: bool) -> None:
    """Forget every send and booking of ADDRESS in the limiter (its budget starts afresh).

    Mails already deferred still wake at their time and then ask the limiter again.
    """
    settings = _settings()
    key = _recipient(address)
    limiter = _shared_limiter(settings)
    try:
        hashed = limiter.storage_key("recipient", key)
        if not yes and not click.confirm(
            f"Forget every send and booking of recipient {hashed}?", err=True
        ):
            fail("not reset")
        limiter.reset(key)
    except BackendUnavailable as exc:
        fail(str(exc))
    finally:
        limiter.close()
    click.echo(f"reset {hashed}")


@main.command(short_help="Replay traffic through a policy on a virtual clock.")
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
    help="A second policy to replay the same trace through: the two side by side.",
)
@click.option(
    "--max-wait",
    "max_waits",
    multiple=True,
    metavar="KIND=DURATION",
    help="Override a kind's tolerance, e.g. code=2m (repeatable).",
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
    plot_path: str | None,
    top: int,
) -> None:
    """Replay traffic through the real limiter on a virtual clock: what a policy would do.

    A CSV trace has rows time,recipient[,kind[,tenant]] (time in seconds from the start) or
    use a generated --pattern. With neither it runs the built-in example: a day of mixed
    traffic for 1000 recipients with one abused address. Scoped policies (domain, sender,
    tenant; fixed and gcra tiers) replay as the workers would decide them. --against compares
    two policies on the same trace.
    """
    from mailer import simulate as sim  # noqa: PLC0415 - loaded only for this command

    settings = _settings()
    if csv_path and pattern:
        fail("give --csv or --pattern, not both", USAGE)
    policy = settings.policy if policy_text is None else _policy(policy_text)
    against = None if against_text is None else _policy(against_text, option="--against")
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
    try:
        if against is None:
            report, other = sim.simulate(attempts, policy, kinds), None
        else:
            report, other = sim.compare(attempts, policy, against, kinds)
    except ValueError as exc:
        fail(str(exc), USAGE)
    elapsed = time.perf_counter() - started
    if other is None:
        views.show_report(report, source, elapsed, top)
    else:
        views.show_comparison(report, other, source, elapsed)
    if plot_path:
        _plot(report, plot_path)


# --- helpers ---------------------------------------------------------------------------------


def _recipient(address: str) -> str:
    """The limit key of ``address``, as the worker derives it; a bad address is exit 2."""
    try:
        return normalise_address(address).limit_key
    except InvalidAddress as exc:
        fail(f"bad address: {exc}", USAGE)


def _context(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        fail(f"--context is not valid JSON: {exc}", USAGE)
    if not isinstance(value, dict):
        fail('--context must be a JSON object such as \'{"code": "1234"}\'', USAGE)
    return value


def _policy(text: str, *, option: str = "--policy") -> Policy:
    try:
        return Policy.parse(text, name="recipient")
    except ValueError as exc:
        fail(f"{option}: {exc}", USAGE)


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


def refuse_problems(settings: Settings) -> None:
    """Refuse what a worker would refuse at start (one line, exit 2): shared storage needs it."""
    for problem in settings.problems():
        fail(problem, USAGE)


def _shared_limiter_url(settings: Settings) -> None:
    """Refuse (exit 2, or 1 for memory://) settings under which no shared limiter can be read."""
    refuse_problems(settings)
    if settings.limiter_url.startswith("memory:"):
        fail(
            "MAILGUARD_LIMITER_URL is memory://: each worker process keeps its own counts, "
            "which this command cannot see; set the workers' shared redis:// limiter URL"
        )


def _shared_limiter(settings: Settings) -> Limiter:
    _shared_limiter_url(settings)
    try:
        return Limiter.from_url(
            settings.limiter_url, settings.policy, secret=settings.secret, tz=settings.timezone
        )
    except ValueError as exc:
        fail(f"MAILGUARD_LIMITER_URL: {exc}", USAGE)


def _celery() -> tuple[Any, Any]:
    refuse_problems(_settings())
    from workers.app import app  # noqa: PLC0415 - Celery only when needed
    from workers.tasks import send_mail  # noqa: PLC0415

    return app, send_mail


def _state(app: Any, mail_id: str) -> tuple[str, Any]:
    try:
        return read_state(app, mail_id)
    except Exception as exc:
        fail(f"cannot read the result backend {mask_url(app.conf.result_backend)}: {exc}")


def _wait(app: Any, mail_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    shown = None
    while True:
        state, meta = _state(app, mail_id)
        if state in ("SUCCESS", "FAILURE"):
            break
        if state == "DEFERRED" and isinstance(meta, Mapping) and meta.get("due") != shown:
            shown = meta.get("due")
            tier = f", tier {meta['tier']}" if meta.get("tier") else ""
            due = f" until {views.when(float(shown))}" if shown else ""
            click.echo(f"deferred{due} ({meta.get('reason')}{tier})", err=True)
        if time.monotonic() >= deadline:
            fail(f"no outcome within {timeout:g} s (state {state}); see `mailguard outcome`")
        time.sleep(0.2)
    _show_outcome(mail_id, state, meta, as_json=False)
    status_ = meta.get("status") if isinstance(meta, Mapping) else None
    if status_ != "sent":
        raise click.exceptions.Exit(REFUSED)


def _show_outcome(mail_id: str, state: str, meta: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"mail_id": mail_id, "state": state, "outcome": meta}, indent=2))
    else:
        views.show_outcome(mail_id, state, meta)


if __name__ == "__main__":
    main()


main.add_command(cli_suppression.suppress)
main.add_command(cli_suppression.unsuppress)
main.add_command(cli_suppression.suppressed)
main.add_command(cli_schedule.cancel)
main.add_command(cli_schedule.scheduled)
