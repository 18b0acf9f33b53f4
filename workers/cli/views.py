"""How the ``mailguard`` command shows things: rich tables and the text of times and durations.

One function per screen: a mail's outcome (``send --wait``, ``outcome``), a recipient's budget
(``status``) and a simulation report (``simulate``); the demo's own views are in
:mod:`workers.demo.views`. JSON output stays with the commands. Addresses are never shown: a
recipient is its keyed hash, as in the outcomes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table

from mailer.durations import human
from mailer.guard import iso

if TYPE_CHECKING:
    from mailer.simulate import Report, Summary

#: Outcome fields holding an epoch time, shown as a UTC date and time.
TIME_FIELDS = ("due", "decided_at", "sent_at", "admitted_at")
#: Columns of a simulation summary (:func:`summary_cells`), after the row's label.
SUMMARY_COLUMNS = (
    "attempts",
    "delivered",
    "on time",
    "deferred",
    "late p50",
    "late p95",
    "late max",
    "dropped",
)


#: The width, in columns, of output that is not a terminal (a pipe, a file, a CI log): wide
#: enough that no table cell is cut (``other@example.o…``), as a table takes only its width.
PIPE_WIDTH = 10_000


def console(*, markup: bool = False) -> Console:
    """A console at least 100 columns wide in a terminal (tables stay readable in a narrow
    one), :data:`PIPE_WIDTH` wide when stdout is not a terminal: a table is never cut there.
    ``markup`` off: a value holding brackets (``<[recipient]>``) prints as it is; the demo's
    styled views turn it on."""
    probe = Console()
    width = max(100, probe.width) if probe.is_terminal else PIPE_WIDTH
    return Console(highlight=False, soft_wrap=True, markup=markup, width=width)


def print_whole(table: Table) -> None:
    """Print ``table`` at its full width, wider than :func:`console` when it needs to be: no
    header or label is cut (a simulation's ten columns, a recipient's keyed hash)."""
    out = console()
    needed = out.measure(table, options=out.options.update_width(PIPE_WIDTH)).maximum
    if needed > out.width:
        out = Console(highlight=False, soft_wrap=True, markup=False, width=needed)
    out.print(table)


def duration(seconds: float) -> str:
    """``0.25s``, ``42s``, ``4m 59s``, ``19h``, ``2d 3h`` (:func:`mailer.durations.human`)."""
    return human(seconds)


def when(epoch: float) -> str:
    """ISO 8601 in UTC, to the second: ``2026-01-31T12:00:00+00:00``."""
    return iso(epoch)


# --- a mail's outcome ------------------------------------------------------------------------


def show_outcome(mail_id: str, state: str, meta: Any) -> None:
    """A mail's state and its outcome, one field a row (times as dates, the wait as a duration)."""
    table = Table(
        "field", "value", title=f"mail {mail_id}: {state}", title_justify="left", box=box.SIMPLE
    )
    if isinstance(meta, Mapping):
        for name, value in meta.items():
            if value is None or value == [] or name == "mail_id":  # [] : no refused recipient
                continue
            table.add_row(name, _outcome_value(name, value))
    else:
        table.add_row("info", str(meta))
    console().print(table)


def _outcome_value(name: str, value: Any) -> str:
    if name in TIME_FIELDS and isinstance(value, (int, float)):
        return when(float(value))
    if name == "wait" and isinstance(value, (int, float)):
        return duration(float(value))
    return str(value)


# --- a recipient's budget --------------------------------------------------------------------


def show_status(report: Mapping[str, Any]) -> None:
    """A recipient's budget as ``mailguard status`` reports it (the same keys as its JSON)."""
    out = console()
    out.print(f"recipient  {report['recipient']}  (keyed hash; the address is never shown)")
    out.print(f"policy     {report['policy']}")
    if report["allowed_now"]:
        out.print("next mail  now")
    else:
        tier = report["binding_tier"]
        why = f", bound by {tier}" if tier else ", after the booked sends"
        out.print(f"next mail  in {duration(report['wait'])} (at {when(report['next_at'])}){why}")
    booked = report["booked"]
    out.print(f"booked     {booked} future send{'' if booked == 1 else 's'}")
    table = Table(
        "tier",
        "used / limit",
        "room",
        box=box.SIMPLE,
        caption="used: sends and bookings in the window",
    )
    for row in report["tiers"]:
        room = row["limit"] - row["used"]
        table.add_row(str(row["tier"]), f"{row['used']} / {row['limit']}", str(room))
    out.print(table)


def show_scoped_status(report: Mapping[str, Any]) -> None:
    """A scoped policy's budgets as ``mailguard status`` reports them (its JSON's keys)."""
    out = console()
    if "recipient" in report:
        out.print(f"recipient  {report['recipient']}  (keyed hash; the address is never shown)")
    out.print(f"policy     {report['policy']}")
    if "allowed_now" in report:
        if report["allowed_now"]:
            out.print("next mail  now")
        else:
            tier = report["binding_tier"]
            why = f", bound by {tier}" if tier else ", after the booked sends"
            out.print(
                f"next mail  in {duration(report['wait'])} (at {when(report['next_at'])}){why}"
            )
    table = Table(
        "scope",
        "subject",
        "tier",
        "used / limit",
        "room",
        box=box.SIMPLE,
        caption="used: sends and bookings in the window (fixed: the calendar window of now)",
    )
    for scope in report["scopes"]:
        for n, row in enumerate(scope["tiers"]):
            table.add_row(
                scope["scope"] if n == 0 else "",
                scope["subject"] if n == 0 else "",
                str(row["tier"]),
                f"{row['used']} / {row['limit']}",
                str(row["limit"] - row["used"]),
            )
    out.print(table)


# --- a simulation report ---------------------------------------------------------------------


def show_report(report: Report, source: str, elapsed: float, top: int) -> None:
    """A :class:`~mailer.simulate.Report`: per kind, per binding tier, the most limited."""
    out = console()
    total = report.total
    out.print(
        f"policy {report.policy}; {source}: {total.attempts:,} attempts to "
        f"{report.recipients:,} recipients over {duration(report.duration)}; "
        f"simulated in {duration(elapsed)}"
    )
    waits = ", ".join(f"{k} {duration(v)}" for k, v in sorted(report.max_waits.items()))
    out.print(f"max wait per kind: {waits}")
    table = _summary_table("per kind", "kind", SUMMARY_COLUMNS)
    for name, summary in [*report.per_kind.items(), ("all", total)]:
        table.add_row(name, *summary_cells(summary), end_section=name == "all")
    print_whole(table)
    tiers = _summary_table("per binding tier", "tier", SUMMARY_COLUMNS[3:])
    for name, summary in report.per_tier.items():
        tiers.add_row(name, *summary_cells(summary)[3:])
    print_whole(tiers)
    if top:
        title = "most limited recipients (keyed hash)"
        recipients = _summary_table(title, "recipient", SUMMARY_COLUMNS)
        for label, summary in report.top_recipients(top):
            recipients.add_row(label, *summary_cells(summary))
        print_whole(recipients)


def show_comparison(first: Report, second: Report, source: str, elapsed: float) -> None:
    """Two :class:`~mailer.simulate.Report` of one trace side by side: per kind and in all."""
    out = console()
    total = first.total
    out.print(
        f"{source}: {total.attempts:,} attempts to {first.recipients:,} recipients over "
        f"{duration(first.duration)}; both policies simulated in {duration(elapsed)}"
    )
    out.print(f"A: {first.policy}")
    out.print(f"B: {second.policy}")
    table = Table(title="A against B, per kind", title_justify="left", box=box.SIMPLE)
    table.add_column("kind")
    table.add_column("policy", min_width=len("policy"))
    _number_columns(table, SUMMARY_COLUMNS)
    kinds = sorted(set(first.per_kind) | set(second.per_kind))
    for name in [*kinds, "all"]:
        for label, report in (("A", first), ("B", second)):
            summary = report.total if name == "all" else report.per_kind.get(name)
            if summary is not None:
                table.add_row(
                    name if label == "A" else "",
                    label,
                    *summary_cells(summary),
                    end_section=label == "B",
                )
    print_whole(table)
    for label, report in (("A", first), ("B", second)):
        binding = ", ".join(
            f"{tier} {s.deferred:,} deferred / {s.dropped:,} dropped"
            for tier, s in report.per_tier.items()
            if s.attempts
        )
        out.print(f"{label} binding tiers: {binding or 'none (every mail on time)'}")


def _summary_table(title: str, label: str, columns: tuple[str, ...]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE)
    table.add_column(label)
    _number_columns(table, columns)
    return table


def _number_columns(table: Table, columns: tuple[str, ...]) -> None:
    """Right-aligned columns never narrower than their header: a narrow table cuts or wraps
    the row labels (first column), never a header (``attemp…``)."""
    for column in columns:
        table.add_column(column, justify="right", min_width=len(column), no_wrap=True)


def summary_cells(summary: Summary) -> list[str]:
    """A :class:`~mailer.simulate.Summary` as the cells of :data:`SUMMARY_COLUMNS`."""

    def late(value: float | None) -> str:
        return "-" if value is None else duration(value)

    return [
        f"{summary.attempts:,}",
        f"{summary.delivered:,}",
        f"{summary.sent:,}",
        f"{summary.deferred:,}",
        late(summary.lateness_p50),
        late(summary.lateness_p95),
        late(summary.lateness_max),
        f"{summary.dropped:,}",
    ]


def show_dead_letters(letters: Sequence[Mapping[str, Any]]) -> None:
    """The quarantined mails (``mailguard status --dead-letters``), newest first."""
    out = console()
    if not letters:
        out.print("no dead letters: no mail was quarantined")
        return
    table = Table(title="dead letters (newest first)", title_justify="left", box=box.SIMPLE)
    for column in ("quarantined", "mail id", "kind", "why"):
        table.add_column(column)
    for letter in letters:
        stamp = letter.get("decided_at")
        table.add_row(
            when(stamp) if isinstance(stamp, int | float) else "?",
            str(letter.get("mail_id")),
            str(letter.get("kind")),
            str(letter.get("detail") or letter.get("reason")),
        )
    out.print(table)
