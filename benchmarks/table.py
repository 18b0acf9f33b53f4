"""The one table: each headline figure as a ratio to its floor measured in the same run.

A program, not a test: ``make bench`` runs it first (``python -m benchmarks.table``), about a
minute and a half on a 2-core machine. The README's and docs/explanation/performance.md's tables
come from its output. Floors, each measured by this program in this run:

- **no-op script**: an ``EVALSHA`` of ``return 0`` on the same connection, in the same rounds
  (:mod:`benchmarks.decision`): what any one-script decision costs at the least;
- **the seed's design**: the project's first multi-tier sliding-window script, same policy,
  same client path, same rounds (:mod:`benchmarks.decision`);
- **unguarded task**: a Celery task that builds and sends the same mail with no guard, drained
  by the same worker in interleaved batches (:mod:`benchmarks.guard`);
- bytes per waiting mail have no floor: ``used_memory`` growth of the one Redis the parked
  mails use (schedule, result records, ledger), per mail (:mod:`benchmarks.schedule`), against
  the target.

``--decision`` runs the decision rows only (about ten seconds).
"""

from __future__ import annotations

import sys

import redis

from benchmarks import decision, guard, schedule
from benchmarks.limiter import _machine
from devservers.redis_servers import RedisServer

Row = tuple[str, str, str, str, str]
#: Guard rounds and batch size here: fewer than ``benchmarks.guard`` alone, to stay bounded.
GUARD_ROUNDS, GUARD_BATCH = 5, 300
WAITING_MAILS = 1_000


def _met(ok: bool) -> str:
    return "yes" if ok else "no"


def decision_rows(figures: dict[str, decision.Figures]) -> list[Row]:
    """Hot and distinct: client rate against the no-op floor and against the seed's design,
    the server's time per call against the seed's."""
    noop = figures["no-op"]
    rows: list[Row] = []
    for shape in ("hot", "distinct"):
        ours, seed = figures[f"mailguard {shape}"], figures[f"seed {shape}"]
        label = "hot key (refused)" if shape == "hot" else "distinct keys (admitted)"
        rows.append(
            (
                f"decision, {label}: calls/s",
                f"{ours.rate:,.0f}",
                f"no-op script {noop.rate:,.0f} / {ours.ratio(noop):.3f}",
                ">= 0.85",
                _met(ours.ratio(noop) >= 0.85),
            )
        )
        rows.append(
            (
                "  same, against the seed's design",
                f"{ours.rate:,.0f}",
                f"seed {seed.rate:,.0f} / {ours.ratio(seed):.3f}",
                ">= 1.00",
                _met(ours.ratio(seed) >= 1.0),
            )
        )
        rows.append(
            (
                "  server time per call, us (INFO commandstats)",
                f"{ours.server_us:.2f}",
                f"seed {seed.server_us:.2f} / {seed.server_us / ours.server_us:.2f} "
                f"(no-op {noop.server_us:.2f})",
                ">= 1.00",
                _met(ours.server_us <= seed.server_us),
            )
        )
    return rows


def guard_rows(run: guard.Run) -> list[Row]:
    """Worker throughput and Redis commands per mail against the unguarded task."""
    ratio = run.ratio()
    guarded = run.commands_per_mail(guard.GUARDED)
    unguarded = run.commands_per_mail(guard.UNGUARDED)
    return [
        (
            "worker throughput, guarded send_mail: mails/s (ratio: median of rounds)",
            f"{run.rate(guard.GUARDED):,.0f}",
            f"unguarded task {run.rate(guard.UNGUARDED):,.0f} / {ratio:.2f}",
            ">= 0.97",
            _met(ratio >= 0.97),
        ),
        (
            "Redis commands per sent mail (every Redis, in scripts too)",
            f"{guarded:.1f}",
            f"unguarded task {unguarded:.1f} / +{guarded - unguarded:.1f}",
            "<= +8",
            _met(guarded - unguarded <= 8),
        ),
    ]


def waiting_rows(figures: schedule.Figures) -> list[Row]:
    """Bytes per waiting (parked) mail, all in, against the target."""
    return [
        (
            "Redis bytes per waiting mail, all in (used_memory growth)",
            f"{figures.redis_per_mail:,.0f}",
            f"schedule keys {figures.schedule_per_mail:,.0f}, "
            f"result record {figures.result_per_mail:,.0f}",
            "<= 600",
            _met(figures.redis_per_mail <= 600),
        )
    ]


def print_table(rows: list[Row]) -> None:
    """``rows`` under a header, columns padded."""
    rows = [("measure", "value", "floor / ratio", "target", "met"), *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for n, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


def _load() -> str:
    with open("/proc/loadavg") as loadavg:
        return loadavg.read().split()[0]


def main() -> None:
    server = RedisServer().start()
    try:
        version = redis.Redis.from_url(server.url).info("server")["redis_version"]
        print(f"machine: {_machine()}, redis-server {version} on loopback; load {_load()}")
        rows = decision_rows(decision.measure(server.url))
    finally:
        server.cleanup()
    if "--decision" not in sys.argv[1:]:
        rows += guard_rows(guard.collect(GUARD_ROUNDS, GUARD_BATCH, quiet=True))
        waiting = schedule.run_design("parked", "5s", WAITING_MAILS, 60.0, waiting_only=True)
        rows += waiting_rows(waiting)
    print(
        f"(load at the end {_load()}; rates are medians over {decision.ROUNDS} interleaved "
        "rounds, a ratio of rates the median of the rounds' ratios)"
    )
    print_table(rows)


if __name__ == "__main__":
    main()
