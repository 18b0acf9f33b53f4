"""Schedule benchmark: parked mails vs countdown tasks. A program, not a test (``make bench``).

Each design runs on a fresh redis-server (broker db 1, results db 2, limiter, ledger and
schedule db 0) with one real worker (``celery -A benchmarks.celery_app worker``, prefork pool,
concurrency 2, the in-memory transport):

- **parked**: ``MAILGUARD_PARK_AFTER=5s``: a booked mail goes to the schedule, its run ends;
- **countdown**: ``MAILGUARD_PARK_AFTER=off``: today's design, the worker holds each booked mail
  as a countdown task (and would hop every ``MAX_COUNTDOWN``, 10 min, on a longer wait).

Steps, the same for both (``N`` mails, ``--mails``, default 5 000: about 5 minutes on a 2-core
machine, most of it the worker's own throughput, twice per design):

1. a warm-up: ``WARMUP`` guarded mails sent, so that each pool process has built its guard;
2. every one of ``N`` recipients is given one send at ``T0`` through the limiter (``1/W``), so
   each of the ``N`` mails then published is booked for the same second, ``T0 + W``; **enqueue
   to parked/deferred** is mails per second, publish to the last result saying DEFERRED
   and the broker's queue empty (a countdown mail is then held by the worker);
3. once all wait: the worker's RSS growth (main process + pool), Redis's ``used_memory``
   growth per waiting mail (and, for the schedule, the bytes of its own keys per mail, apart
   from the Celery result record each mail keeps in both designs; and every key family that
   grew, bytes per mail each: the result record, the schedule's entries, the ledger's keys
   (none once a first run's mail is parked), the broker's copy of a countdown), then **idle** for
   ``IDLE`` seconds: Redis commands per second (``total_commands_processed``, the program's
   own two INFO calls taken out), ``send_mail`` runs (the worker log's ``received`` lines: a
   deferral's ``ignored`` line is filtered out of the log), worker CPU;
4. **promotion**: from the due second until the schedule is empty (handed to the broker)
   and until every mail is sent;
5. **floor**: ``min(N, FLOOR_MAILS)`` unguarded tasks (``bench.unguarded``: build and send, no
   guard) published and drained on the same worker: mails per second, publish to last result.

``--waiting-only`` stops after step 3 (the memory and idle figures of a scale run such as
``--mails 100000 --parked-only``, without waiting for the slot); it then deletes the waiting
mails' result records, then the ledger's keys of the waiting mails (claims, turns), and
reports the ``used_memory`` each freed per mail (their all-in cost: Redis's tables and expires
entries included). One waiting mail's result record is printed as stored (key, TTL, value).

The booking window (how far ahead every mail is booked) is sized from a first, short floor
measurement, so that parking ``N`` mails ends before the slot even on a busy machine.

Hops are not run (a 10-minute ``MAX_COUNTDOWN`` is past the waits here); their cost per mail
booked a day ahead is ``86 400 / 600 = 144`` task runs, shown from the measured run cost.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import redis
from celery import Celery

from benchmarks import waiting_scale
from benchmarks.limiter import _machine
from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.redis_servers import RedisServer
from mailer import Limiter, Policy
from mailer.records.schedule import RedisSchedule

GUARDED, UNGUARDED = "mailguard.send_mail", "bench.unguarded"
IDLE = 10.0  # seconds of the idle window
WARMUP = 50  # guarded mails sent before measuring
FLOOR_MAILS = 2000  # unguarded mails for the floor, at most
POLL = 0.25
_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _rss(pid: int) -> int:
    """Resident bytes of ``pid``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _worker_pids(worker: CeleryWorker) -> list[int]:
    assert worker.process is not None
    return [worker.process.pid, *worker.children()]


def _count(results: redis.Redis, ids: list[str], status: str) -> int:
    """How many of ``ids`` have a stored result with ``status``."""
    seen = 0
    for start in range(0, len(ids), 2000):
        keys = [f"celery-task-meta-{i}" for i in ids[start : start + 2000]]
        for raw in results.mget(keys):
            if raw is not None and json.loads(raw).get("status") == status:
                seen += 1
    return seen


def _wait_for(results: redis.Redis, ids: list[str], status: str, timeout: float) -> float:
    """Block until every id has ``status``; the time it happened (epoch seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _count(results, ids, status) == len(ids):
            return time.time()
        time.sleep(POLL)
    raise SystemExit(f"timed out: not every mail reached {status} within {timeout:g} s")


def _publish(app: Celery, task: str, addresses: list[str], kwargs: dict[str, str]) -> list[str]:
    ids = [str(uuid.uuid4()) for _ in addresses]
    with app.producer_or_acquire() as producer:
        for task_id, to in zip(ids, addresses, strict=True):
            app.send_task(task, args=[to], kwargs=kwargs, task_id=task_id, producer=producer)
    return ids


@dataclass
class Figures:
    """One design's figures."""

    floor_rate: float = 0.0  # unguarded mails/s
    enqueue_rate: float = 0.0  # mails/s to parked (or deferred)
    worker_growth: float = 0.0  # bytes, main + pool
    worker_main_growth: float = 0.0
    redis_per_mail: float = 0.0  # bytes
    schedule_per_mail: float = 0.0  # bytes of the schedule's own keys
    ledger_per_mail: float = 0.0  # bytes of the ledger's keys of the waiting mails
    result_per_mail: float = 0.0  # bytes of one Celery result record
    idle_commands: float = 0.0  # per second
    idle_runs: int = 0
    idle_cpu: float = 0.0  # share of one core
    handed: float | None = None  # seconds from due to the schedule empty
    sent: float = 0.0  # seconds from due to all sent
    run_cpu_ms: float = 0.0  # worker CPU per run while parking/deferring, ms
    run_main_cpu_ms: float = 0.0  # of which the main process
    floor_cpu_ms: float = 0.0  # worker CPU per unguarded run, ms
    floor_main_cpu_ms: float = 0.0  # of which the main process
    #: Key families grown while the mails were put to wait: (keys, bytes).
    families: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: One waiting mail's result record as stored: key, TTL, bytes and value.
    record: str = ""
    #: ``used_memory`` freed per mail by deleting the waiting mails' result records (their
    #: all-in cost: value, key, Redis's tables and expires entry); ``--waiting-only`` runs.
    record_all_in: float = 0.0
    #: The same for the ledger's keys of the waiting mails (deleted after the records).
    ledger_all_in: float = 0.0
    #: ``MEMORY STATS`` parts grown while the mails were put to wait, bytes per mail.
    memory_parts: dict[str, float] = field(default_factory=dict)
    #: What each waiting mail wrote, to copy at scale (:mod:`benchmarks.waiting_scale`);
    #: ``--waiting-only`` runs.
    sample: waiting_scale.Sample | None = None


#: A key's family: its name with every id (a UUID, a hash tag of a limiter key, a long hex
#: hash, a number) replaced by ``*``.
_ID = re.compile(
    rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    rb"|(?<=\{)[A-Za-z0-9_-]{12,}(?=\})|[0-9a-f]{16,}|\d+"
)


def key_families(url: str, dbs: tuple[int, ...] = (0, 1, 2)) -> dict[str, tuple[int, int]]:
    """Every key of ``dbs`` on the server at ``url`` by family (``db<n> <name with ids as *>``):
    how many keys and their bytes (``MEMORY USAGE``, the key's name, value and Redis's own
    overhead; the allocator's rounding and Redis's tables are not in it)."""
    families: dict[str, tuple[int, int]] = {}
    base = url.rsplit("/", 1)[0]
    for db in dbs:
        client = redis.Redis.from_url(f"{base}/{db}")
        try:
            for key in client.scan_iter(count=1000):
                family = f"db{db} {_ID.sub(b'*', key).decode(errors='replace')}"
                count, size = families.get(family, (0, 0))
                families[family] = (count + 1, size + int(client.memory_usage(key, samples=0) or 0))
        finally:
            client.close()
    return families


def family_growth(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """What each family grew by (keys, bytes) from ``before`` to ``after``; grown ones only."""
    grown = {}
    for family, (count, size) in after.items():
        was = before.get(family, (0, 0))
        if size != was[1] or count != was[0]:
            grown[family] = (count - was[0], size - was[1])
    return grown


def _freed_by_deleting(admin: redis.Redis, client: redis.Redis, keys: list[bytes | str]) -> int:
    """``used_memory`` freed by deleting ``keys`` from ``client``'s database (at the end of a
    waiting-only run: the worker is idle): their all-in cost, Redis's tables included once its
    cron has shrunk them. 0 for no keys."""
    if not keys:
        return 0
    before = int(admin.info("memory")["used_memory"])
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])
    time.sleep(1.0)  # serverCron (hz 10) resizes the emptied tables
    return before - int(admin.info("memory")["used_memory"])


#: The ledger's keys of one mail (:mod:`mailer.records.ledger.redis`).
LEDGER_FAMILIES = ("claim", "sent", "runs", "turn")


def _ledger_keys(admin: redis.Redis, ids: list[str]) -> list[bytes | str]:
    """The ledger's keys of the mails ``ids`` that exist (one ``EXISTS`` each, pipelined)."""
    names = [f"mailguard:{family}:{{{i}}}" for i in ids for family in LEDGER_FAMILIES]
    pipe = admin.pipeline(transaction=False)
    for name in names:
        pipe.exists(name)
    return [name for name, found in zip(names, pipe.execute(), strict=True) if found]


def memory_parts(admin: redis.Redis) -> dict[str, int]:
    """``MEMORY STATS`` of the server in parts: the keys' own bytes (``dataset``), Redis's
    key tables over every database (``main tables``, ``expires tables``), client buffers and
    script caches."""
    stats = admin.memory_stats()
    dbs = [v for k, v in stats.items() if k.startswith("db.") and isinstance(v, dict)]
    return {
        "dataset": int(stats["dataset.bytes"]),
        "main tables": sum(int(db["overhead.hashtable.main"]) for db in dbs),
        "expires tables": sum(int(db["overhead.hashtable.expires"]) for db in dbs),
        "clients": int(stats["clients.normal"]),
        "scripts": int(stats.get("lua.caches", 0)) + int(stats.get("functions.caches", 0)),
    }


def sample_record(results: redis.Redis, key: str) -> str:
    """One result record as Redis holds it: its key, TTL, value's length, ``MEMORY USAGE``
    and value."""
    value = results.get(key) or b""
    usage = results.memory_usage(key, samples=0)
    return (
        f"{key}: TTL {results.ttl(key)} s, value {len(value)} B, MEMORY USAGE {usage} B\n"
        f"  {value.decode(errors='replace')}"
    )


_RUN_START = re.compile(r"Task mailguard\.send_mail\[[^\]]+\] received")


def _runs(log: str) -> int:
    """Runs of ``send_mail``, from the worker log (each run is received once)."""
    return len(_RUN_START.findall(log))


def _drained(broker: redis.Redis, timeout: float) -> float:
    """Block until the mail queue's lists in the broker are empty (every message taken)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(broker.llen(key) for key in broker.scan_iter("mail*", _type="list")):
            return time.time()
        time.sleep(POLL)
    raise SystemExit(f"timed out: the broker still holds messages after {timeout:g} s")


def _floor(
    app: Celery, results: redis.Redis, count: int, tag: str, pids: list[int] | None = None
) -> tuple[float, float, float]:
    """Unguarded mails per second on the running worker (publish to the last result), and the
    CPU per run (ms) of ``pids`` (the worker's processes, main first) and of its main process."""
    addresses = [f"{tag}{n}@example.com" for n in range(count)]
    pids = pids or []
    cpu_before = [_cpu(pid) for pid in pids]
    started = time.time()
    ids = _publish(app, UNGUARDED, addresses, {"subject": "s", "body": "b"})
    rate = count / (_wait_for(results, ids, "SUCCESS", 600) - started)
    spent = [_cpu(pid) - before for pid, before in zip(pids, cpu_before, strict=True)]
    return rate, sum(spent) / count * 1000, (spent[0] if spent else 0.0) / count * 1000


def estimate_rate(mails: int) -> float:
    """A first, short floor measurement (its own Redis and worker): sizes the booking window."""
    server = RedisServer().start()
    env = worker_env(server.url, "memory://")
    app = client_app(env)
    results = redis.Redis.from_url(env["MAILGUARD_RESULT_BACKEND"])
    worker = CeleryWorker(env, app_module="benchmarks.celery_app", name="estimate").start()
    try:
        return _floor(app, results, min(mails, 1000), "estimate")[0]
    finally:
        worker.stop(timeout=60)
        app.close()
        results.close()
        server.cleanup()


def run_design(
    name: str, park_after: str, mails: int, window: float, *, waiting_only: bool = False
) -> Figures:
    """Run one design end to end on a fresh Redis and worker; its figures. ``window`` is the
    seconds from the limiter's first sends to the slot every mail is booked for.
    ``waiting_only`` stops once every mail waits and the idle window is measured (the scale
    run's memory figures, without waiting for the slot, the sends and the floor)."""
    server = RedisServer().start()
    env = worker_env(
        server.url,
        "memory://",
        MAILGUARD_POLICY=f"1/{window:.0f}s",
        MAILGUARD_PARK_AFTER=park_after,
    )
    app = client_app(env)
    results = redis.Redis.from_url(env["MAILGUARD_RESULT_BACKEND"])
    admin = redis.Redis.from_url(env["MAILGUARD_LIMITER_URL"])
    admin_broker = redis.Redis.from_url(env["MAILGUARD_BROKER_URL"])
    worker = CeleryWorker(env, app_module="benchmarks.celery_app", name=name).start()
    figures = Figures()
    try:
        addresses = [f"r{n}@example.com" for n in range(mails)]
        # Warm up: each pool process builds its guard (limiter, ledger, templates) on first use.
        warm = [f"warm{n}@example.com" for n in range(WARMUP)]
        _wait_for(
            results, _publish(app, GUARDED, warm, {"subject": "s", "body": "b"}), "SUCCESS", 60
        )

        limiter = Limiter.from_url(
            env["MAILGUARD_LIMITER_URL"],
            Policy.parse(env["MAILGUARD_POLICY"], name="recipient"),
            secret=env["MAILGUARD_SECRET"],
        )
        for start in range(0, mails, 1000):
            limiter.acquire_many(addresses[start : start + 1000])
        limiter.close()
        due = time.time() + window
        pids = _worker_pids(worker)
        rss_before = {pid: _rss(pid) for pid in pids}
        cpu_before = sum(_cpu(pid) for pid in pids)
        main_before = _cpu(pids[0])
        families_before = key_families(server.url)
        names_before = waiting_scale.names(server.url, (0, 1, 2))
        memory_before = int(admin.info("memory")["used_memory"])
        parts_before = memory_parts(admin)
        started = time.time()
        ids = _publish(app, GUARDED, addresses, {"subject": "s", "body": "b"})
        _wait_for(results, ids, "DEFERRED", window - 5)
        waiting = _drained(admin_broker, window - 5)  # countdown: every retry held by the worker
        figures.enqueue_rate = mails / (waiting - started)
        figures.run_cpu_ms = (sum(_cpu(p) for p in pids) - cpu_before) / mails * 1000
        figures.run_main_cpu_ms = (_cpu(pids[0]) - main_before) / mails * 1000
        time.sleep(1.0)  # the last acknowledgements and countdown hand-offs
        figures.worker_growth = sum(_rss(pid) - rss for pid, rss in rss_before.items())
        figures.worker_main_growth = _rss(pids[0]) - rss_before[pids[0]]
        figures.redis_per_mail = (int(admin.info("memory")["used_memory"]) - memory_before) / mails
        parts = memory_parts(admin)
        figures.memory_parts = {k: (v - parts_before.get(k, 0)) / mails for k, v in parts.items()}
        schedule_keys = [k for k in admin.keys("mailguard:{schedule*") if b"dead" not in k]
        own = sum(int(admin.memory_usage(k, samples=0) or 0) for k in schedule_keys)
        figures.schedule_per_mail = own / mails
        ledger_keys = _ledger_keys(admin, ids)
        figures.ledger_per_mail = (
            sum(int(admin.memory_usage(k, samples=0) or 0) for k in ledger_keys) / mails
        )
        sample = [f"celery-task-meta-{i}" for i in ids[:200]]
        figures.result_per_mail = sum(results.memory_usage(k) or 0 for k in sample) / len(sample)
        figures.families = family_growth(families_before, key_families(server.url))
        figures.record = sample_record(results, sample[0])
        print(f"  {name}: {mails:,} waiting; idle for {IDLE:g} s", flush=True)

        log_before = _runs(worker.log())
        commands = int(admin.info("stats")["total_commands_processed"])
        cpu = sum(_cpu(pid) for pid in pids)
        time.sleep(IDLE)
        figures.idle_cpu = (sum(_cpu(pid) for pid in pids) - cpu) / IDLE
        spent = int(admin.info("stats")["total_commands_processed"]) - commands - 2
        figures.idle_commands = spent / IDLE
        figures.idle_runs = _runs(worker.log()) - log_before
        if waiting_only:
            figures.sample = waiting_scale.sample(server.url, names_before, ids)
            records: list[bytes | str] = [f"celery-task-meta-{i}" for i in ids]
            figures.record_all_in = _freed_by_deleting(admin, results, records) / mails
            ledger_keys = _ledger_keys(admin, ids)
            figures.ledger_all_in = _freed_by_deleting(admin, admin, ledger_keys) / mails
            return figures

        if time.time() > due:
            print(f"  {name}: warning: the slot passed before the idle window ended", flush=True)
        time.sleep(max(due - time.time(), 0.0))
        if park_after != "off":
            stats = RedisSchedule(admin, server.url, queue="mail").stats
            while stats().parked + stats().promoting:
                time.sleep(0.02)
            figures.handed = time.time() - due
        figures.sent = _wait_for(results, ids, "SUCCESS", 600) - due
        print(f"  {name}: all sent {figures.sent:.1f} s after the slot", flush=True)
        figures.floor_rate, figures.floor_cpu_ms, figures.floor_main_cpu_ms = _floor(
            app, results, min(mails, FLOOR_MAILS), f"{name}-floor", pids
        )
        print(f"  {name}: unguarded floor {figures.floor_rate:,.0f} mails/s", flush=True)
    finally:
        worker.stop(timeout=60)
        app.close()
        results.close()
        admin.close()
        admin_broker.close()
        server.cleanup()
    return figures


def _mb(value: float) -> str:
    return f"{value / 1e6:,.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mails", type=int, default=5_000, help="mails per design")
    parser.add_argument(
        "--parked-only", action="store_true", help="skip the countdown design (for iterating)"
    )
    parser.add_argument(
        "--waiting-only",
        action="store_true",
        help="stop once every mail waits: memory and idle figures only (for --mails 100000)",
    )
    args = parser.parse_args()
    print(f"schedule benchmark: {args.mails:,} mails per design; {_machine()}", flush=True)
    rate = estimate_rate(args.mails)
    # Parking runs at about half the floor on a quiet machine: leave three times that.
    window = 30 + 3 * args.mails / rate
    print(f"  first floor {rate:,.0f} mails/s: every mail booked {window:.0f} s ahead", flush=True)
    parked = run_design("parked", "5s", args.mails, window, waiting_only=args.waiting_only)
    held = (
        Figures()
        if args.parked_only
        else run_design("countdown", "off", args.mails, window, waiting_only=args.waiting_only)
    )
    rows = [
        ("enqueue to waiting, mails/s", parked.enqueue_rate, held.enqueue_rate, "{:,.0f}"),
        ("unguarded floor, mails/s", parked.floor_rate, held.floor_rate, "{:,.0f}"),
        ("worker CPU per run to waiting, ms", parked.run_cpu_ms, held.run_cpu_ms, "{:.2f}"),
        ("  of which the main process", parked.run_main_cpu_ms, held.run_main_cpu_ms, "{:.2f}"),
        ("worker CPU per unguarded run, ms", parked.floor_cpu_ms, held.floor_cpu_ms, "{:.2f}"),
        ("  of which the main process", parked.floor_main_cpu_ms, held.floor_main_cpu_ms, "{:.2f}"),
        ("worker RSS growth (main + pool)", parked.worker_growth, held.worker_growth, "mb"),
        ("  of which the main process", parked.worker_main_growth, held.worker_main_growth, "mb"),
        ("Redis bytes per waiting mail", parked.redis_per_mail, held.redis_per_mail, "{:,.0f}"),
        ("  the schedule's own keys", parked.schedule_per_mail, held.schedule_per_mail, "{:,.0f}"),
        ("  the ledger's keys", parked.ledger_per_mail, held.ledger_per_mail, "{:,.0f}"),
        ("  one Celery result record", parked.result_per_mail, held.result_per_mail, "{:,.0f}"),
        ("  freed deleting the records", parked.record_all_in, held.record_all_in, "{:,.0f}"),
        ("  freed deleting the ledger's keys", parked.ledger_all_in, held.ledger_all_in, "{:,.0f}"),
        ("idle: Redis commands/s", parked.idle_commands, held.idle_commands, "{:.1f}"),
        ("idle: send_mail runs", parked.idle_runs, held.idle_runs, "{:d}"),
        ("idle: worker CPU, % of a core", parked.idle_cpu * 100, held.idle_cpu * 100, "{:.2f}"),
        ("due -> all handed to the broker, s", parked.handed, None, "{:.2f}"),
        ("due -> all sent, s", parked.sent, held.sent, "{:.2f}"),
        ("task runs per mail booked 1 day ahead", 1, 1 + 86_400 // 600, "{:d}"),
    ]
    if args.waiting_only:  # nothing was sent and no floor measured
        rows = [r for r in rows if "unguarded" not in r[0] and not r[0].startswith("due")]
    else:  # the records are deleted in waiting-only runs alone
        rows = [r for r in rows if "freed" not in r[0]]
    print(f"\n| {args.mails:,} mails | parked | countdown + hops |")
    print("|---|---|---|")
    for label, a, b, shape in rows:
        cells = [
            "-" if v is None else _mb(float(v)) if shape == "mb" else shape.format(v)
            for v in (a, b)
        ]
        print(f"| {label} | {cells[0]} | {cells[1]} |")
    for name, figures in (("parked", parked), ("countdown", held)):
        if figures.families:
            print(f"\n{name}: key families grown while waiting, bytes per mail (MEMORY USAGE)")
            for family, (count, size) in sorted(figures.families.items()):
                if count or abs(size) >= args.mails:  # new keys, or at least 1 B a mail
                    print(f"  {family}: {count:+,} keys, {size / args.mails:,.0f} B")
        if figures.memory_parts:
            grown = ", ".join(f"{k} {v:,.0f}" for k, v in figures.memory_parts.items())
            print(f"{name}: used_memory grown by part (MEMORY STATS), B per mail: {grown}")
        if figures.record:
            print(f"{name}: one waiting mail's result record\n  {figures.record}")
    if parked.floor_rate:
        ratio = parked.enqueue_rate / parked.floor_rate
        print(f"\nparked enqueue rate / unguarded floor on the same worker: {ratio:.2f}")


if __name__ == "__main__":
    main()
