"""A figure of a replay (matplotlib, an optional extra)."""

from __future__ import annotations

from pathlib import Path

from mailer.simulate.report import DAY, Report

#: The lateness histogram's ticks: seconds and the durations people think in.
LATENESS_TICKS = (
    (0.01, "10 ms"),
    (0.1, "100 ms"),
    (1.0, "1 s"),
    (10.0, "10 s"),
    (60.0, "1 min"),
    (600.0, "10 min"),
    (3600.0, "1 h"),
    (6 * 3600.0, "6 h"),
    (DAY, "1 d"),
)


def plot(report: Report, path: str | Path, *, recipients: int = 8) -> None:
    """Draw ``report`` to a PNG at ``path``: a timeline of the ``recipients`` most limited
    recipients (attempts, sends, deferrals, drops) above a histogram of lateness.

    Needs matplotlib (``pip install 'celery-mailguard[plot]'``); raises ``RuntimeError`` saying so
    when it is missing.
    """
    try:
        from matplotlib.figure import Figure  # noqa: PLC0415 - optional extra, loaded on use
    except ImportError:
        raise RuntimeError(
            "plotting needs matplotlib: pip install 'celery-mailguard[plot]' (or matplotlib)"
        ) from None
    fig = Figure(figsize=(11, 7), layout="constrained")
    timeline, histogram = fig.subplots(2, 1, height_ratios=(3, 2))
    top = [label for label, _ in report.top_recipients(recipients)]
    rows = {label: row for row, label in enumerate(reversed(top))}
    marks: dict[str, tuple[list[float], list[float]]] = {
        name: ([], []) for name in ("attempt", "sent", "deferred", "dropped")
    }
    for result in report.results:
        row = rows.get(result.recipient)
        if row is None:
            continue
        hour = result.attempt.time / 3600
        marks["attempt"][0].append(hour)
        marks["attempt"][1].append(row + 0.2)
        if result.status == "dropped":
            marks["dropped"][0].append(hour)
            marks["dropped"][1].append(row)
        else:
            marks[result.status][0].append((result.attempt.time + result.lateness) / 3600)
            marks[result.status][1].append(row)
    styles = {
        "attempt": ("|", "grey", "attempt"),
        "sent": ("o", "tab:green", "sent on time"),
        "deferred": ("o", "tab:orange", "sent late (deferred)"),
        "dropped": ("x", "tab:red", "dropped"),
    }
    for name, (xs, ys) in marks.items():
        marker, colour, label = styles[name]
        timeline.scatter(xs, ys, marker=marker, color=colour, label=label, s=18)
    timeline.set_yticks(range(len(top)), [f"recipient {label}" for label in reversed(top)])
    timeline.set_xlabel("hours from the start")
    timeline.set_title(f"policy {report.policy}: the {len(top)} most limited recipients")
    timeline.legend(loc="upper right", fontsize="small")
    late = [max(r.lateness, 0.001) for r in report.results if r.status == "deferred"]
    # Lateness spans milliseconds to a day: log-spaced bins, ticks in seconds, minutes, hours.
    low, high = min(late, default=1.0), max(late, default=1.0)
    edges = [low * (high * 1.0001 / low) ** (k / 40) for k in range(41)]
    histogram.hist(late, bins=edges, color="tab:orange")
    histogram.set_xscale("log")
    ticks = [(t, name) for t, name in LATENESS_TICKS if low / 2 <= t <= high * 2]
    histogram.set_xticks([t for t, _ in ticks], [name for _, name in ticks])
    histogram.set_xlabel("lateness of deferred mails after the attempt (log scale)")
    histogram.set_ylabel("mails")
    histogram.set_title(f"{len(late)} deferred mails")
    fig.savefig(str(path), format="png")
