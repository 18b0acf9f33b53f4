"""Schedule at scale: a million parked mails on one node, and a schedule spread over a Cluster.

A program, not a test (``python -m benchmarks.schedule_scale``; bounded, it stops by itself).
Each layout is measured in the same run, on the same fresh redis-server: **single-slot**
(``shards=1``: every entry under ``<ns>:{schedule:<q>}``, the layout before sharding) and
**sharded** (:data:`mailer.records.schedule.SHARDS` hash slots), one after the other:

1. **park** ``N`` mails (``--mails``, default 100 000): ``N - SLICE`` due in a day (spread over
   an hour), written with the schedule's own ``park.lua`` through pipelines (``EVALSHA``, one
   pipeline a shard; no worker), realistic payloads (a mail id of 36 characters, the payload
   :class:`workers.waiting.payload.Parked` encodes for a short mail). Reported: parking rate,
   Redis's
   ``used_memory`` growth per mail, and ``MEMORY USAGE`` of the schedule's own keys per mail
   (over the ``N - SLICE`` parked first);
2. **promote a slice**: ``SLICE`` more mails (``--slice``) parked once the promoter runs, due
   over ``SPREAD`` seconds from ``LEAD`` seconds on (1 000 a second), with the real promoter
   (:class:`workers.polling.promoter.Promoter`, its own thread) publishing to a Redis broker (db 1,
   the queue's lists). A reader pops the list every few milliseconds;
   **lateness** is the time a message is in the broker minus its due time (negative: published
   ahead with its countdown, as the promoter does within ``TAKE_AHEAD``), p50/p99/max;
3. **idle**: nothing due (the rest is due in a day), the promoter polling for ``IDLE`` seconds:
   Redis commands per second (``INFO stats``, its own ``INFO`` calls taken out).

Then the **Cluster**: a three-node Redis Cluster (:class:`devservers.redis_servers.
RedisClusterServers`), ``--cluster-mails`` parked (default 100 000) in each layout, written
to each shard's node directly: entries and ``used_memory`` growth per node, and how far the
fullest node is above the mean (the target: within 10 %).

``--mails 1000000`` is the issue's run (about 3 minutes parking on a 2-core machine).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from devservers.celery_worker import client_app, worker_env
from devservers.redis_servers import RedisClusterServers, RedisServer
from mailer.records.schedule import SHARDS, RedisSchedule, ScheduleShard, schedule_from_url
from mailer.records.schedule.ids import stored
from mailer.records.schedule.shard import PARK_SCRIPT
from mailer.settings import Settings
from mailer.steps import Progress
from workers.polling.promoter import Promoter
from workers.waiting.payload import Parked

MAILS = 100_000
SLICE = 10_000
SPREAD = 10.0  # seconds over which the slice is due
LEAD = 8.0  # seconds from the promoter's start to the slice's first due time
IDLE = 10.0  # seconds of the idle window
CLUSTER_MAILS = 100_000
CHUNK = 2_000  # parks per pipeline
QUEUE = "mail"
PARK_SHA = hashlib.sha1(PARK_SCRIPT.encode()).hexdigest()  # noqa: S324 (Redis's script id)


@dataclass
class Figures:
    """One layout's figures on one node."""

    park_rate: float = 0.0  # mails/s
    used_per_mail: float = 0.0  # bytes
    keys_per_mail: float = 0.0  # bytes, MEMORY USAGE of the schedule's keys
    late: list[float] = field(default_factory=list)  # s, message in the broker - due
    promoted_in: float = 0.0  # s, from the first due time to the last message
    idle_commands: float = 0.0  # per second


def _payload(n: int, mail_id: str, due: float) -> bytes:
    kwargs = {
        "mail_id": mail_id,
        "subject": "Our news of the week",
        "body": "Hello",
        "kind": "news",
    }
    progress = Progress(requested_at=due - 86_400)
    return Parked(mail_id, [f"reader-{n}@example.com"], kwargs, due, progress).encode()


def _entries(
    count: int, first: float, spread: float, start: int = 0
) -> Iterator[tuple[str, float, bytes]]:
    for n in range(start, start + count):
        mail_id = str(uuid.uuid4())
        due = first + spread * (n - start) / max(count, 1)
        yield mail_id, due, _payload(n, mail_id, due)


def park_bulk(
    schedule: RedisSchedule,
    entries: Iterator[tuple[str, float, bytes]],
    node_of: Any = None,
) -> int:
    """Park every entry with ``park.lua`` through one pipeline a shard (``node_of(shard)``: the
    client of the node holding the shard; the schedule's own client by default)."""
    clients = {id(s): (node_of(s) if node_of else schedule.client) for s in schedule.shards}
    for client in {id(c): c for c in clients.values()}.values():
        client.script_load(PARK_SCRIPT)
    pending: dict[int, list[tuple[ScheduleShard, str, int, bytes]]] = {}
    parked = 0
    for mail_id, due, payload in entries:
        shard = schedule.shard_of(mail_id)
        batch = pending.setdefault(id(shard), [])
        batch.append((shard, mail_id, round(due * 1000), payload))
        if len(batch) >= CHUNK:
            parked += _flush(clients[id(shard)], batch)
    for key, batch in pending.items():
        parked += _flush(clients[key], batch)
    return parked


def _flush(client: Any, batch: list[tuple[ScheduleShard, str, int, bytes]]) -> int:
    pipe = client.pipeline(transaction=False)
    for shard, mail_id, due_ms, payload in batch:
        keys = (shard.due_key, shard.promoting_key, shard.payloads_key, shard.watch_key)
        pipe.evalsha(PARK_SHA, 4, *keys, stored(mail_id), due_ms, payload)
    pipe.execute()
    done = len(batch)
    batch.clear()
    return done


def _used(client: Any) -> int:
    return int(client.info("memory")["used_memory"])


def _commands(client: Any) -> int:
    return int(client.info("stats")["total_commands_processed"])


class Reader:
    """Pops the broker's queue every few milliseconds: when each task id was first seen."""

    def __init__(self, broker: redis.Redis, queue: str) -> None:
        # kombu's Redis transport: one list a priority step (``<queue>\x06\x16<step>``).
        self.broker, self.lists = broker, [queue, *(f"{queue}\x06\x16{p}" for p in range(1, 10))]
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Reader:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            pipe = self.broker.pipeline(transaction=False)
            for name in self.lists:
                pipe.rpop(name, 1000)
            raws = [raw for popped in pipe.execute() for raw in popped or ()]
            now = time.time()
            for raw in raws:
                self.seen.setdefault(json.loads(raw)["headers"]["id"], now)
            if not raws:
                self._stop.wait(0.003)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def run_node(
    server: RedisServer, shards: int, mails: int, slice_: int, idle: float = IDLE
) -> Figures:
    """One layout on ``server`` (flushed first): park, promote a slice, idle. The single-slot
    layout's promoter reads its first entries every poll, as before sharding."""
    figures = Figures()
    env = worker_env(server.url, "memory://", MAILGUARD_QUEUE=QUEUE)
    os.environ.update(env)  # the promoter's limiter clock (workers.run.state) reads the process's
    admin = redis.Redis.from_url(server.url)
    broker = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
    admin.flushall()
    schedule = RedisSchedule(
        redis.Redis.from_url(server.url), server.url, queue=QUEUE, shards=shards
    )
    before = _used(admin)
    started = time.perf_counter()
    bulk = park_bulk(schedule, _entries(mails - slice_, time.time() + 86_400, 3600.0))
    figures.park_rate = bulk / (time.perf_counter() - started)
    figures.used_per_mail = (_used(admin) - before) / bulk
    keys = admin.keys("mailguard:{schedule*")
    figures.keys_per_mail = sum(int(admin.memory_usage(k, samples=0) or 0) for k in keys) / bulk

    app = client_app(env)
    promoter = Promoter(app, schedule, Settings.from_env(env))
    if shards == 1:
        promoter._stale = 0.0
    reader = Reader(broker, QUEUE).start()
    promoter.start()
    # Parked as a worker would (by another client, well ahead: parked mails wait longer than
    # PARK_AFTER), due from LEAD seconds on.
    first_due = time.time() + LEAD
    slice_entries = list(_entries(slice_, first_due, SPREAD, bulk))
    due = {m: d for m, d, _ in slice_entries}
    park_bulk(schedule, iter(slice_entries))
    if time.time() > first_due - 1.0:
        print("  warning: the slice was parked less than a second ahead", flush=True)
    deadline = first_due + SPREAD + 60
    while len(reader.seen) < slice_ and time.time() < deadline:
        time.sleep(0.05)
    reader.stop()
    figures.late = [reader.seen[m] - d for m, d in due.items() if m in reader.seen]
    figures.promoted_in = max(reader.seen.values(), default=first_due) - first_due
    if len(figures.late) < slice_:
        print(f"  warning: {slice_ - len(figures.late)} of the slice not seen in time", flush=True)

    time.sleep(1.0)  # the last batch's done
    count = _commands(admin)
    time.sleep(idle)
    figures.idle_commands = (_commands(admin) - count - 1) / idle if idle else 0.0
    promoter.stop()
    app.close()
    for client in (admin, broker, schedule.client):
        client.close()
    return figures


def run_cluster(cluster: RedisClusterServers, shards: int, mails: int) -> list[tuple[int, int]]:
    """Park ``mails`` on ``cluster`` in one layout; per node: entries and used_memory growth."""
    schedule = schedule_from_url(cluster.url, queue=QUEUE)
    assert isinstance(schedule, RedisSchedule)
    schedule = RedisSchedule(schedule.client, cluster.url, queue=QUEUE, shards=shards)
    nodes = {n.port: redis.Redis(port=n.port) for n in cluster.nodes}
    for client in nodes.values():
        client.flushall()
    before = {port: _used(client) for port, client in nodes.items()}

    def node_of(shard: ScheduleShard) -> redis.Redis:
        return nodes[int(schedule.client.get_node_from_key(shard.due_key).port)]

    park_bulk(schedule, _entries(mails, time.time() + 86_400, 3600.0), node_of)
    rows = []
    for port, client in nodes.items():
        entries = sum(int(client.zcard(s.due_key)) for s in schedule.shards if node_of(s) is client)
        rows.append((entries, _used(client) - before[port]))
    for client in nodes.values():
        client.flushall()
        client.close()
    schedule.client.close()
    return rows


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _late(values: list[float]) -> list[float]:
    return [max(v, 0.0) for v in values]


def _rows(nodes: dict[str, Figures]) -> list[tuple[str, list[float], str]]:
    runs = list(nodes.values())
    late = [_late(f.late) for f in runs]
    return [
        ("parking rate (with payloads), mails/s", [f.park_rate for f in runs], "{:,.0f}"),
        ("used_memory per mail, B", [f.used_per_mail for f in runs], "{:,.0f}"),
        ("schedule keys per mail, B", [f.keys_per_mail for f in runs], "{:,.0f}"),
        ("lateness p50, s", [_pct(v, 0.5) for v in late], "{:.3f}"),
        ("lateness p99, s (target <= 1)", [_pct(v, 0.99) for v in late], "{:.3f}"),
        ("lateness max, s", [max(v, default=0.0) for v in late], "{:.3f}"),
        ("published ahead of due, %", [_ahead(f.late) for f in runs], "{:.1f}"),
        ("slice in the broker, s after 1st due", [f.promoted_in for f in runs], "{:.2f}"),
        ("idle: Redis commands/s", [f.idle_commands for f in runs], "{:.1f}"),
    ]


def _ahead(values: list[float]) -> float:
    return 100 * sum(v <= 0 for v in values) / max(len(values), 1)


def report(nodes: dict[str, Figures], spread: dict[str, list[tuple[int, int]]], args: Any) -> None:
    names = list(nodes)
    print(f"\none node, {args.mails:,} parked, a slice of {args.slice:,} due over {SPREAD:g} s")
    print(f"  {'':<38}" + "".join(f"{n:>16}" for n in names) + f"{'sharded/single':>16}")
    for title, values, fmt in _rows(nodes):
        single, sharded = values[names.index("single-slot")], values[1 - names.index("single-slot")]
        ratio = sharded / single if single else float("nan")
        cells = "".join(f"{fmt.format(v):>16}" for v in values)
        print(f"  {title:<38}{cells}{ratio:>16.2f}")
    if spread:
        print(f"\n3-node Cluster, {args.cluster_mails:,} parked mails: entries per node (share)")
        for name, rows in spread.items():
            total = sum(e for e, _ in rows) or 1
            mean = total / len(rows)
            cells = "  ".join(f"{e:>7,} ({100 * e / total:4.1f} %)" for e, _ in rows)
            above = 100 * (max(e for e, _ in rows) / mean - 1)
            mem = "  ".join(f"{m / 2**20:6.1f}" for _, m in rows)
            print(f"  {name:<12} {cells}   fullest +{above:.1f} % over the mean; MiB: {mem}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mails", type=int, default=MAILS, help="parked on one node")
    parser.add_argument("--slice", type=int, default=SLICE, help="made due and promoted")
    parser.add_argument("--cluster-mails", type=int, default=CLUSTER_MAILS, help="0: no Cluster")
    parser.add_argument(
        "--sharded-first", action="store_true", help="measure the sharded layout first"
    )
    args = parser.parse_args()
    layouts = {"single-slot": 1, f"{SHARDS} shards": SHARDS}
    if args.sharded_first:
        layouts = dict(reversed(layouts.items()))
    began = time.time()
    nodes: dict[str, Figures] = {}
    server = RedisServer().start()
    try:
        print("warm-up (the promoter's guard and connections; not reported)", flush=True)
        run_node(server, SHARDS, 1000, 500, idle=0.0)
        for name, shards in layouts.items():
            print(f"{name}: parking {args.mails:,} on one node", flush=True)
            nodes[name] = run_node(server, shards, args.mails, min(args.slice, args.mails))
    finally:
        server.cleanup()
    spread: dict[str, list[tuple[int, int]]] = {}
    if args.cluster_mails:
        cluster = RedisClusterServers().start()
        try:
            for name, shards in layouts.items():
                print(f"{name}: parking {args.cluster_mails:,} on a 3-node Cluster", flush=True)
                spread[name] = run_cluster(cluster, shards, args.cluster_mails)
        finally:
            cluster.cleanup()
    report(nodes, spread, args)
    print(f"\n(run took {time.time() - began:.0f} s; load average {_load()})")


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


if __name__ == "__main__":
    main()
