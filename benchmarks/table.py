"""The one table: each headline figure as a ratio to its floor measured in the same run.

A program, not a test: ``make bench`` runs it first (``python -m benchmarks.table``), about four
minutes on a 2-core machine. The README's and docs/explanation/performance.md's tables
come from its output. Floors, each measured by this program in this run:

- **no-op script**: an ``EVALSHA`` of ``return 0`` on the same connection, in the same rounds
  (:mod:`benchmarks.decision`): what any one-script decision costs at the least;
- **the seed's design**: the project's first multi-tier sliding-window script, same policy,
  same client path, same rounds (:mod:`benchmarks.decision`);
- **the lower bound** (information): a script making only the Redis calls an exact decision on
  the server's clock cannot do without (``TIME``, ``GET``, and ``SET`` for an admission), no
  decision, same client path and rounds (:mod:`benchmarks.decision`);
- **the reference policy without a provider scope**: the same decisions under the reference
  policy plus ``provider: 2000/1h fixed; provider google: 50/1s gcra, 20000/1h fixed``,
  recipients over four providers, the finder warm (:mod:`benchmarks.provider_scope`): the
  server's and the client's time per decision, with against without, for information;
- **unguarded task**: a Celery task that builds and sends the same mail with no guard, drained
  by the same worker in interleaved batches (:mod:`benchmarks.guard`);
- **plain task**: Redis commands per sent mail from ``.delay()`` in a process of its own to the
  stored result, every server counted, against a plain Celery task on the same broker and
  backend: one Redis laid out as the README deploys it, and broker and ledger on two servers
  (:mod:`benchmarks.per_mail`);
- **a connection per mail**: SMTP through a STARTTLS + AUTH Postfix on loopback, its queue on
  disk (:mod:`benchmarks.smtp_reuse` ``--postfix``): the mails a second of a connection carrying
  up to 100 mails against a connection per mail (connect, EHLO, STARTTLS, EHLO, AUTH, the mail,
  QUIT: a plain Celery task's way), rounds alternating, Postfix's Maildirs checked to hold each
  mail once;
- bytes per waiting mail have no floor: a real worker parks a thousand mails
  (:mod:`benchmarks.schedule`), and copies of what they wrote (schedule, result records,
  ledger) fill a fresh Redis to 32 768-65 536 waiting mails (:mod:`benchmarks.waiting_scale`):
  ``MEMORY STATS``' dataset and key tables per mail, the mean over that span against the
  target; the thousand real mails' own growth (dataset, key tables and script caches in one
  snapshot, the client buffers aside: the program's and the worker's connections, not the
  mails') is shown for information;
- gcra at 100 000 bookings (:mod:`benchmarks.limiter`, its ``--backlog`` orders): the time of
  a decision in each booking order against the same order at 10 bookings, Redis (server time)
  and memory; the worst order, and the worst with the front insertions timed as insertions at
  both sizes;
- the schedule at scale (:mod:`benchmarks.schedule_scale`, smaller than its own run: 100 000
  parked on one node, 30 000 on a three-node Cluster): promotion lateness p99 against its
  target, and the fullest Cluster node against the mean of the three.

``--decision`` runs the decision rows only, the provider scope's included (about twenty
seconds); ``--bytes`` the bytes rows only
(about a minute).
"""

from __future__ import annotations

import sys

import redis

from benchmarks import (
    decision,
    guard,
    limiter,
    per_mail,
    provider_scope,
    schedule,
    schedule_scale,
    smtp_reuse,
    waiting_scale,
)
from benchmarks.limiter import _machine
from devservers.redis_servers import RedisClusterServers, RedisServer
from mailer.records.schedule import SHARDS

Row = tuple[str, str, str, str, str]
#: Guard rounds and batch size here: fewer than ``benchmarks.guard`` alone, to stay bounded.
GUARD_ROUNDS, GUARD_BATCH = 5, 300
WAITING_MAILS = 1_000
#: The schedule at scale here: parked on one node (a slice of them promoted), on a Cluster.
SCALE_MAILS, SCALE_SLICE, CLUSTER_MAILS = 100_000, 10_000, 30_000


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
        bound = figures[f"bound {shape}"]
        rows.append(
            (
                "  same, against the lower bound (TIME, GET, SET: no decision)",
                f"{ours.rate:,.0f}",
                f"bound {bound.rate:,.0f} / {ours.ratio(bound):.3f} "
                f"(bound / no-op {bound.ratio(noop):.3f})",
                "information",
                "",
            )
        )
        rows.append(
            (
                "  server time per call, us (INFO commandstats)",
                f"{ours.server_us:.2f}",
                f"seed {seed.server_us:.2f} / {seed.server_us / ours.server_us:.2f} "
                f"(no-op {noop.server_us:.2f}, bound {bound.server_us:.2f})",
                ">= 1.00",
                _met(ours.server_us <= seed.server_us),
            )
        )
    return rows


def provider_rows(figures: provider_scope.Figures) -> list[Row]:
    """The decision with a provider scope against without, same rounds: the server's time per
    decision, then the client's (round trip included)."""
    with_, without = provider_scope.CONTENDERS[1], provider_scope.CONTENDERS[0]
    rows: list[Row] = []
    for label, figure in (
        ("decision with a provider scope: server time per decision, us", figures.server_us),
        ("  same, client time per decision, us (round trip)", figures.client_us),
    ):
        low, high = figures.spread(figure)
        rows.append(
            (
                label,
                f"{figures.median(figure, with_):.1f}",
                f"without {figures.median(figure, without):.1f} / {figures.ratio(figure):.2f} "
                f"({low:.2f}-{high:.2f}; admitted {figures.median(figures.admitted, with_):.0%} "
                f"/ {figures.median(figures.admitted, without):.0%})",
                "information",
                "",
            )
        )
    return rows


def guard_rows(run: guard.Run) -> list[Row]:
    """Worker throughput against the unguarded task."""
    ratio = run.ratio()
    return [
        (
            "worker throughput, guarded send_mail: mails/s (ratio: median of rounds)",
            f"{run.rate(guard.GUARDED):,.0f}",
            f"unguarded task {run.rate(guard.UNGUARDED):,.0f} / {ratio:.2f}",
            ">= 0.97",
            _met(ratio >= 0.97),
        )
    ]


def commands_rows(counts: list[per_mail.Count]) -> list[Row]:
    """Redis commands per sent mail, enqueue to result, as the README deploys it and split,
    against a plain Celery task (:mod:`benchmarks.per_mail`)."""
    by = {(c.app, c.layout): c for c in counts}
    rows: list[Row] = []
    for layout, label in (("one server", "one Redis, README's databases"), ("split", "split")):
        ours, floor = by["mailguard", layout].per_mail, by["plain", layout].per_mail
        rows.append(
            (
                f"Redis commands per sent mail, delay() to result ({label}; in scripts too)",
                f"{ours:.1f}",
                f"plain task {floor:.1f} / +{ours - floor:.1f}",
                f"<= +{per_mail.TARGET:.0f}",
                _met(ours - floor <= per_mail.TARGET),
            )
        )
    return rows


def waiting_rows(figures: schedule.Figures) -> list[Row]:
    """Bytes per waiting (parked) mail, all in, against the target: with 32 768 to 65 536
    waiting, copies of the real mails' entries (:mod:`benchmarks.waiting_scale`: the mean over
    that span, Redis's tables at every fill, and its least and most); then, for information,
    the first thousand real mails' growth of ``MEMORY STATS``' dataset, key tables and script
    caches, read in one snapshot, which carries costs that do not grow with the mails; the
    client buffers (the program's and the worker's connections, which hold no mail: tens of
    bytes a mail either way from run to run) are shown, not counted."""
    parts = figures.memory_parts
    clients = parts.get("clients", 0.0)
    kept = sum(parts.values()) - clients
    if figures.sample is None:
        raise SystemExit("waiting bytes: the run sampled no waiting mail (--waiting-only)")
    scale = waiting_scale.per_mail(figures.sample, waiting_scale.LOW, waiting_scale.STEPS)
    return [
        (
            f"Redis bytes per waiting mail, all in, {scale.low:,} to {scale.high:,} waiting "
            "(dataset, key tables)",
            f"{scale.mean:,.0f}",
            f"{scale.least:,.0f} to {scale.most:,.0f} by how full Redis's tables are",
            "<= 600",
            _met(scale.mean <= 600),
        ),
        (
            f"same, the first {WAITING_MAILS:,} real mails (dataset, key tables, scripts)",
            f"{kept:,.0f}",
            f"schedule keys {figures.schedule_per_mail:,.0f}, "
            f"result record {figures.result_per_mail:,.0f}, "
            f"ledger {figures.ledger_per_mail:,.0f}; "
            f"client buffers {clients:+,.0f}",
            "information",
            "",
        ),
    ]


def gcra_rows() -> list[Row]:
    """The worst booking order's ratio at 100 000 to 10 bookings, Redis and memory: the worst
    of every order, then the worst with the front insertions timed as insertions at both."""
    counts = (limiter.BACKLOGS[0], limiter.BACKLOGS[-1])
    server = RedisServer().start()
    try:
        orders = limiter.bench_orders(server.url, counts)
        front = limiter.bench_front_inserts(server.url, counts)
    finally:
        server.cleanup()
    memory = limiter.bench_memory_orders(counts)
    memory_front = limiter.bench_memory_front_inserts(counts)
    rows: list[Row] = []
    for store, found, inserted in (("Redis", orders, front), ("memory", memory, memory_front)):
        worst, same = limiter._order_rows(found, counts, f"gcra, {store}", inserted)[-2:]
        rows += [
            (f"gcra at {counts[1]:,} bookings, {store}: worst order / {counts[0]}", *worst[1:]),
            ("  same, front insertions timed as insertions at both sizes", *same[1:]),
        ]
    return rows


def scale_rows() -> list[Row]:
    """Promotion lateness with ``SCALE_MAILS`` parked on one node (the sharded layout a
    Cluster uses), and the fullest node of a three-node Cluster against the mean."""
    server = RedisServer().start()
    try:
        figures = schedule_scale.run_node(server, SHARDS, SCALE_MAILS, SCALE_SLICE)
    finally:
        server.cleanup()
    cluster = RedisClusterServers().start()
    try:
        nodes = schedule_scale.run_cluster(cluster, SHARDS, CLUSTER_MAILS)
    finally:
        cluster.cleanup()
    late = sorted(max(v, 0.0) for v in figures.late)
    p99 = late[min(len(late) - 1, int(0.99 * len(late)))] if late else float("nan")
    entries = [e for e, _ in nodes]
    above = 100 * (max(entries) / (sum(entries) / len(entries)) - 1)
    return [
        (
            f"schedule, {SCALE_MAILS:,} parked: promotion lateness p99, s",
            f"{p99:.3f}",
            f"schedule alone {figures.used_per_mail:,.0f} B a mail; "
            f"idle {figures.idle_commands:.1f} cmds/s",
            "<= 1",
            _met(p99 <= 1.0 and len(late) == SCALE_SLICE),
        ),
        (
            f"schedule on a 3-node Cluster, {CLUSTER_MAILS:,} parked: fullest node",
            f"+{above:.1f} %",
            "over the mean of the nodes",
            "<= +10 %",
            _met(above <= 10.0),
        ),
    ]


def smtp_rows(mails: int = 300, rounds: int = 5) -> list[Row]:
    """Reuse against a connection per mail through a Postfix started here (root, Debian's
    postfix): mails a second, the median of the rounds' ratios, and its range."""
    figures, _ = smtp_reuse.collect_postfix(mails, rounds, quiet=True)
    paired = figures.paired
    return [
        (
            "SMTP via Postfix, STARTTLS + AUTH, queue on disk: mails/s, up to 100 a connection",
            f"{figures.median('reuse'):,.0f}",
            f"a connection per mail {figures.median('per mail'):,.0f} / {figures.ratio:.2f}x "
            f"(rounds {min(paired):.2f}-{max(paired):.2f})",
            f">= {smtp_reuse.TARGET:g}x",
            _met(figures.ratio >= smtp_reuse.TARGET),
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
        only_bytes = "--bytes" in sys.argv[1:]
        rows = []
        if not only_bytes:
            rows = decision_rows(decision.measure(server.url))
            rows += provider_rows(provider_scope.measure(server.url))
    finally:
        server.cleanup()
    if "--decision" not in sys.argv[1:]:
        if not only_bytes:
            rows += guard_rows(guard.collect(GUARD_ROUNDS, GUARD_BATCH, quiet=True))
            rows += commands_rows(per_mail.run())
        waiting = schedule.run_design("parked", "5s", WAITING_MAILS, 60.0, waiting_only=True)
        rows += waiting_rows(waiting)
        if not only_bytes:
            rows += gcra_rows() + scale_rows() + smtp_rows()
    print(
        f"(load at the end {_load()}; rates are medians over {decision.ROUNDS} interleaved "
        "rounds, a ratio of rates the median of the rounds' ratios)"
    )
    print_table(rows)


if __name__ == "__main__":
    main()
