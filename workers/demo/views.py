"""What the demo shows: the headline, the live table of mails, the summary and the conclusions.

The table shows the demo's own fictitious addresses by short name only: it is the demo's UI,
not a log.
"""

from __future__ import annotations

from collections.abc import Callable

from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table

from mailer.errors import mask_url
from workers.demo.rows import Row
from workers.demo.run import Run, run_demo
from workers.demo.story import MAX_WAIT, RECIPIENTS

_STYLES = {
    "queued": "dim",
    "deferred": "yellow",
    "sent": "green",
    "dropped": "red",
    "failed": "bold red",
}


def headline(run: Run) -> str:
    """One line: the policy, the tolerances, where it runs."""
    waits = ", ".join(f"{k} {run.settings.kinds[k].max_wait:g} s" for k in sorted(MAX_WAIT))
    where = (
        "memory broker and limiter"
        if run.settings.broker_url.startswith("memory:")
        else (f"Redis {mask_url(run.settings.broker_url)}")
    )
    return (
        f"mailguard demo: policy {run.policy} per recipient; max wait {waits}; {where}; "
        f"worker in this process (threads); SMTP capture on {run.smtp.url.removeprefix('smtp://')}"
    )


def mails_table(run: Run, max_rows: int | None = None) -> Table:
    """The mails so far, one row each; ``max_rows`` hides the earliest settled ones."""
    shown, hidden = _shown_rows(run, max_rows)
    caption = f"{hidden} earlier settled mails not shown" if hidden else None
    title = f"t+{run.elapsed:5.1f} s: {sum(r.settled for r in run.rows)}/{len(run.rows)} settled"
    table = Table(
        title=title, title_justify="left", caption=caption, caption_justify="left", box=box.SIMPLE
    )
    table.add_column("#", justify="right")
    table.add_column("queued", justify="right")
    table.add_column("to")
    table.add_column("kind")
    table.add_column("status")
    table.add_column("detail")
    for row in shown:
        table.add_row(
            str(row.n),
            f"t+{row.at:.2f}",
            row.planned.to,
            row.planned.kind,
            f"[{_STYLES.get(row.state, '')}]{row.state}[/]",
            _detail(run, row),
        )
    return table


def _shown_rows(run: Run, max_rows: int | None) -> tuple[list[Row], int]:
    """The enqueued rows that fit in ``max_rows`` (earliest settled ones first to go), and how
    many settled ones were left out."""
    shown = [r for r in run.rows if r.state != "planned"]
    hidden = 0
    if max_rows is not None and len(shown) > max_rows:
        while len(shown) > max_rows and shown[0].settled:
            shown.pop(0)
            hidden += 1
        shown = shown[-max_rows:] if len(shown) > max_rows else shown
    return shown, hidden


def _detail(run: Run, row: Row) -> str:
    def rel(epoch: float | None) -> str:
        return "?" if epoch is None else f"t+{epoch - run.started:.2f}"

    tier = row.tier or "?"
    if row.state == "queued":
        return "waiting for the worker" + (" (paused)" if run.paused else "")
    if row.state == "deferred":
        return f"booked {rel(row.booked)} ({tier})"
    if row.state == "sent":
        if row.rebooked and row.lateness is not None:
            return f"late: re-booked {rel(row.due)}, sent {row.lateness * 1000:+.0f} ms"
        if row.booked is not None and row.lateness is not None:
            return f"booked {rel(row.booked)} ({tier}), sent {row.lateness * 1000:+.0f} ms"
        return f"sent {rel(row.sent_at)}"
    return _dropped(run, row) if row.state == "dropped" else row.reason or ""


def _dropped(run: Run, row: Row) -> str:
    """Why a mail was dropped: its slot was beyond what its kind tolerates from its request."""
    if row.reason != "rate_limited":
        return row.reason or ""
    tolerance = run.settings.kinds[row.planned.kind].max_wait
    kind, tier, wait = row.planned.kind, row.tier or "?", row.wait or 0.0
    if wait > tolerance:
        return f"slot in {wait:.2f} s ({tier}) > {kind}'s {tolerance:g} s"
    return f"slot in {wait:.2f} s ({tier}): past {kind}'s {tolerance:g} s since queued"


def summary_table(run: Run) -> Table:
    """Per recipient: mails, sent, deferred, dropped, largest lateness, captured by SMTP."""
    table = Table(title="summary per recipient", title_justify="left", box=box.SIMPLE)
    table.add_column("recipient")
    table.add_column("story")
    for column in ("mails", "sent", "deferred", "dropped", "max late", "captured"):
        table.add_column(column, justify="right")
    for name, who in RECIPIENTS.items():
        item = run.recipient_summary(name)
        late = item["max_lateness"]
        table.add_row(
            name,
            who.role,
            str(item["mails"]),
            str(item["sent"]),
            str(item["deferred"]),
            str(item["dropped"]),
            "-" if late is None else f"{late * 1000:.0f} ms",
            str(item["captured"]),
        )
    return table


def conclusions(run: Run) -> list[str]:
    """The checks, one line each."""
    summary = run.summary()
    lines = []
    violations = summary["violations"]
    if violations:
        lines.append("[bold red]over the policy:[/] " + "; ".join(violations))
    else:
        lines.append(
            f"no recipient over any tier of {run.policy} (recounted from the sent mails' slots)"
        )
    late = summary["max_lateness_deferred"]
    deferred = sum(r.booked is not None and r.state == "sent" for r in run.rows)
    if late is not None:
        lines.append(
            f"{deferred} deferred mails sent at their booked slot, at most "
            f"{late * 1000:.0f} ms late"
        )
    start, end = summary["outage"]["from"], summary["outage"]["until"]
    rebooked = summary["rebooked"]
    lines.append(
        f"the worker was paused from t+{start:.1f} to t+{end:.1f} s: {rebooked} mail"
        f"{'' if rebooked == 1 else 's'} late for its slot re-booked (not sent late in a bunch)"
    )
    burst = summary["burst"]
    if burst["code_after"] is not None and burst["code_ahead_of"] is not None:
        lines.append(
            f"a code mail queued right behind a newsletter to {burst['size']} readers was "
            f"received {burst['code_after']:.2f} s later, ahead of {burst['code_ahead_of']} "
            f"of the {burst['waiting_at_code']} still waiting (kind priority 9 over 5)"
            + (f"; the newsletter took {burst['took']:.1f} s in all" if burst["took"] else "")
        )
    dropped = [r for r in run.rows if r.state == "dropped"]
    kinds = sorted({r.planned.kind for r in dropped})
    if dropped:
        lines.append(
            f"{len(dropped)} dropped, all of kind {', '.join(kinds)}: their slot was further "
            "away than the kind tolerates"
        )
    sent = sum(r.state == "sent" for r in run.rows)
    lines.append(
        f"the SMTP server captured {summary['captured']} mails for {sent} sent "
        f"(and the newsletter); "
        f"{run.elapsed:.1f} s in all"
    )
    return lines


def show_final(console: Console, run: Run) -> None:
    """Every mail's fate, the summary per recipient and the conclusions."""
    console.print(mails_table(run))
    console.print(summary_table(run))
    for line in conclusions(run):
        console.print(line)


def play_live(
    console: Console, *, redis_url: str | None, speed: float, done: Callable[[Run], None]
) -> Run:
    """:func:`run_demo` under a live table of the mails so far (the earliest settled ones
    scroll off), the headline printed above it first; ``done(run)`` after the live table is
    gone."""
    with Live(console=console, refresh_per_second=10, transient=True) as live:
        started = [False]

        def view(run: Run) -> None:
            if not started[0]:
                console.print(headline(run))
                started[0] = True
            live.update(mails_table(run, max_rows=max(5, console.height - 8)))

        def finish(run: Run) -> None:
            live.stop()
            done(run)

        return run_demo(redis_url=redis_url, speed=speed, view=view, done=finish)
