"""Guard benchmark: a program, not a test. Run with ``make bench``; prints one table.

One real worker (``celery -A benchmarks.celery_app worker``, prefork pool, concurrency 2) on its
own redis-server (broker db 1, results db 2, limiter and ledger db 0) drains batches of
``BATCH`` mails, interleaved round by round (the order flips every round):

- ``mailguard.send_mail`` with the in-memory transport, the reference policy and distinct
  recipients (every mail is admitted and sent: the program checks each result);
- ``bench.unguarded`` (:mod:`benchmarks.celery_app`): the same message built and sent through
  the same transport kind, with no validation, limiter or ledger: the floor.

Each batch is published to a queue of its own while nothing consumes it; the clock starts when
the worker is told to consume that queue (``add_consumer``) and stops at the last result's
``date_done`` as stored by the worker. Throughputs and the ratio are medians over the rounds
(the ratio per round is unguarded span / guarded span). The machine may be shared: the CPU time
other processes used during each batch is measured (``/proc/stat`` minus ours), and rounds in
which they kept more than ``OTHERS_WARN`` cores busy are left out of the medians when at least
one round was quiet.

Inside the worker (:mod:`benchmarks.celery_app`) each mail's parts are timed: the guard's own
time is ``Guard.process`` minus the transport's ``send`` minus ``build_message`` (what the
unguarded task does too). Task runtimes are the worker log's ``succeeded in Xs`` figures (task
body plus storing the result). CPU per mail comes from ``/proc/<pid>/stat``; Redis commands per
mail from ``INFO commandstats`` (commands run inside scripts count too).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import redis
from celery import Celery

from benchmarks.limiter import _machine
from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.redis_servers import RedisServer

ROUNDS = 7
BATCH = 500
WARMUP = 50
TARGET = 0.90
OTHERS_WARN = 0.2  # cores used by other processes during the batches worth a warning
BATCH_TIMEOUT = 30.0
LEDGER_CALLS = ("begin_riding", "begin", "record")
GUARDED, UNGUARDED = "mailguard.send_mail", "bench.unguarded"
SUBJECT, BODY = "Your code", "Your code is 493 112. It expires in 10 minutes."

_TICKS = os.sysconf("SC_CLK_TCK")
_SUCCEEDED_RE = re.compile(r"Task (\S+)\[([0-9a-f-]+)\] succeeded in ([0-9.e-]+)s")


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _cpu_by_party(worker: CeleryWorker, server: RedisServer) -> dict[str, float]:
    """CPU seconds so far: the worker's main process, its pool children, redis-server, this
    process, and every other process on the machine."""
    assert worker.process is not None and server.process is not None
    with open("/proc/stat") as stat:
        jiffies = [int(v) for v in stat.readline().split()[1:]]
    ours = {
        "main": _cpu(worker.process.pid),
        "pool": sum(_cpu(pid) for pid in worker.children()),
        "redis": _cpu(server.process.pid),
        "client": _cpu(os.getpid()),
    }
    # busy = all but idle and iowait; minus ours: what other processes on the machine used
    busy = (sum(jiffies) - jiffies[3] - jiffies[4]) / _TICKS
    return ours | {"others": busy - sum(ours.values())}


def _commands(client: redis.Redis) -> int:
    """Commands the server has run so far (all clients, all databases)."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for v in stats.values())


def run_batch(bench: Bench, task: str, tag: str, count: int) -> Batch:
    """Publish ``count`` mails to a fresh queue and let the worker drain it."""
    app, results = bench.app, bench.results
    queue = f"bench-{tag}-{uuid.uuid4().hex[:6]}"
    ids = []
    with app.producer_or_acquire() as producer:
        for i in range(count):
            result = app.send_task(
                task,
                args=(f"user-{tag}-{i}@example.com", SUBJECT, BODY),
                queue=queue,
                argsrepr="(<redacted>)",
                kwargsrepr="{<redacted>}",
                producer=producer,
            )
            ids.append(result.id)
    keys = [f"celery-task-meta-{i}" for i in ids]
    commands_before = _commands(bench.admin)
    cpu_before = _cpu_by_party(bench.worker, bench.server)
    start = time.time()
    replies = app.control.add_consumer(queue, reply=True, limit=1, timeout=10)
    if not replies:
        raise RuntimeError(f"the worker did not start consuming {queue}")
    deadline = time.monotonic() + BATCH_TIMEOUT
    while results.exists(*keys) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{task}: {results.exists(*keys)} of {count} done after timeout")
        time.sleep(0.05)
    commands = _commands(bench.admin) - commands_before
    cpu_after = _cpu_by_party(bench.worker, bench.server)
    app.control.cancel_consumer(queue, reply=True, limit=1, timeout=10)
    end = 0.0
    for raw in results.mget(keys):
        meta = json.loads(raw or "null") or {"status": "missing"}
        if meta["status"] != "SUCCESS" or meta["result"].get("status") != "sent":
            raise RuntimeError(f"{task}: a mail was not sent: {meta}")
        end = max(end, datetime.fromisoformat(meta["date_done"]).timestamp())
    cpu = {party: cpu_after[party] - cpu_before[party] for party in cpu_after}
    return Batch(end - start, ids, commands, cpu)


@dataclass
class Bench:
    app: Celery
    results: redis.Redis  # the result backend's database
    admin: redis.Redis
    worker: CeleryWorker
    server: RedisServer


@dataclass
class Batch:
    seconds: float  # add_consumer sent .. the last result's date_done
    ids: list[str]
    commands: int  # commands redis-server ran meanwhile (all clients, scripts' calls included)
    cpu: dict[str, float]  # CPU seconds used meanwhile, by party

    @property
    def load(self) -> float:
        """Cores other processes on the machine kept busy meanwhile, on average."""
        return max(0.0, self.cpu["others"]) / self.seconds


def _timings(directory: Path, ids: set[str]) -> dict[str, list[dict[str, float]]]:
    """Per kind, the measured mails' seconds by part (``total``, ``send``, ``build``, ...)."""
    out: dict[str, list[dict[str, float]]] = {"guarded": [], "unguarded": []}
    for path in directory.glob("*.txt"):
        for line in path.read_text().splitlines():
            kind, mail_id, *parts = line.split()
            if mail_id in ids:
                row = {k: float(v) for k, v in (p.split("=") for p in parts)}
                out[kind].append(row)
    return out


def _runtimes(log: str, ids: set[str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {GUARDED: [], UNGUARDED: []}
    for name, task_id, seconds in _SUCCEEDED_RE.findall(log):
        if task_id in ids and name in out:
            out[name].append(float(seconds))
    return out


def _p50(values: list[float]) -> float:
    return statistics.median(values)


def _row(
    measure: str, value: str, floor: str = "", target: str = "", met: str = ""
) -> tuple[str, str, str, str, str]:
    return (measure, value, floor, target, met)


@dataclass
class Run:
    """What :func:`collect` measured: batches by task, per-mail timings, log runtimes."""

    batches: dict[str, list[Batch]]
    timings: dict[str, list[dict[str, float]]]
    runtimes: dict[str, list[float]]

    def clean(self) -> list[tuple[Batch, Batch]]:
        """The (guarded, unguarded) rounds in which other processes stayed quiet, or all."""
        rounds = list(zip(self.batches[GUARDED], self.batches[UNGUARDED], strict=True))
        return [(g, u) for g, u in rounds if max(g.load, u.load) <= OTHERS_WARN] or rounds

    def ratio(self) -> float:
        """Guarded / unguarded throughput: the median over the clean rounds."""
        return statistics.median(u.seconds / g.seconds for g, u in self.clean())

    def rate(self, task: str) -> float:
        """``task``'s mails per second: the median over the clean rounds."""
        index = 0 if task == GUARDED else 1
        return statistics.median(len(p[index].ids) / p[index].seconds for p in self.clean())

    def commands_per_mail(self, task: str) -> float:
        """Redis commands per mail of ``task`` (all clients, calls inside scripts included)."""
        batches = self.batches[task]
        return sum(b.commands for b in batches) / sum(len(b.ids) for b in batches)


def collect(rounds: int = ROUNDS, batch: int = BATCH, *, quiet: bool = False) -> Run:
    """Start a redis-server and a worker, drain ``rounds`` interleaved pairs of batches of
    ``batch`` mails (guarded, unguarded; the order flips every round), stop them."""
    server = RedisServer().start()
    timings_dir = Path(tempfile.mkdtemp(prefix="mailguard-bench-"))
    env = worker_env(
        server.url,
        "memory://",
        MAILGUARD_POLICY="1/60s, 5/1h, 10/24h",
        BENCH_TIMINGS_DIR=str(timings_dir),
    )
    worker = CeleryWorker(env, concurrency=2, name="bench", app_module="benchmarks.celery_app")
    batches: dict[str, list[Batch]] = {GUARDED: [], UNGUARDED: []}
    try:
        admin = redis.Redis.from_url(server.url)
        version = admin.info("server")["redis_version"]
        if not quiet:
            print(
                f"machine: {_machine()}, redis-server {version} on loopback, "
                f"1 worker (prefork, concurrency 2), {rounds} rounds x {batch} mails each"
            )
        worker.start()
        bench = Bench(
            client_app(env),
            redis.Redis.from_url(env["MAILGUARD_RESULT_BACKEND"]),
            admin,
            worker,
            server,
        )
        for task in (GUARDED, UNGUARDED):
            run_batch(bench, task, f"warm-{task}", WARMUP)
        for r in range(rounds):
            for task in (GUARDED, UNGUARDED) if r % 2 == 0 else (UNGUARDED, GUARDED):
                batches[task].append(run_batch(bench, task, f"r{r}-{task}", batch))
        bench.app.close()
        bench.results.close()
        admin.close()
    finally:
        worker.stop()
        server.cleanup()
    ids = {i for task in batches for batch in batches[task] for i in batch.ids}
    timings = _timings(timings_dir, ids)
    shutil.rmtree(timings_dir, ignore_errors=True)
    log = worker.log()
    shutil.rmtree(worker.log_path.parent, ignore_errors=True)
    runtimes = _runtimes(log, ids)
    trouble = [line for line in log.splitlines() if "ERROR" in line or "Traceback" in line]
    if trouble:
        raise RuntimeError("the worker logged errors:\n" + "\n".join(trouble[:10]))
    return Run(batches, timings, runtimes)


def main() -> None:
    started = time.monotonic()
    run = collect()
    batches, timings, runtimes = run.batches, run.timings, run.runtimes

    mails = ROUNDS * BATCH
    # Medians over the rounds, and only over the rounds in which other processes on the machine
    # stayed quiet if there are any: a burst of load from elsewhere spoils rounds, not the result.
    rounds = list(zip(batches[GUARDED], batches[UNGUARDED], strict=True))
    clean = run.clean()
    rate = {task: run.rate(task) for task in (GUARDED, UNGUARDED)}
    per_round = [u.seconds / g.seconds for g, u in rounds]
    ratio = run.ratio()
    aggregate = sum(b.seconds for b in batches[UNGUARDED]) / sum(
        b.seconds for b in batches[GUARDED]
    )
    span = sum(b.seconds for task in batches for b in batches[task])
    others = sum(b.load * b.seconds for task in batches for b in batches[task]) / span
    g_t, u_t = timings["guarded"], timings["unguarded"]
    # The guard's own time: what the unguarded task does not do.
    own = [t["total"] - t.get("send", 0) - t.get("build", 0) for t in g_t]
    ledger = [sum(v for k, v in t.items() if k.startswith("ledger.")) for t in g_t]
    ledger_calls = {
        m: statistics.median(t.get(f"n.ledger.{m}", 0) for t in g_t) for m in LEDGER_CALLS
    }
    other = [o - t.get("acquire", 0) - lg for o, t, lg in zip(own, g_t, ledger, strict=True)]
    rt_g, rt_u = runtimes[GUARDED], runtimes[UNGUARDED]
    commands = {task: run.commands_per_mail(task) for task in batches}

    def us(values: list[float]) -> str:
        return f"{statistics.median(values) * 1e6:.0f}"

    def cpu(task: str) -> str:
        return " / ".join(
            f"{sum(b.cpu[party] for b in batches[task]) / mails * 1e3:.2f}"
            for party in ("main", "pool", "redis", "client")
        )

    rows = [
        _row("measure", "value", "floor / ratio", "target", "met"),
        _row(
            "send_mail guarded: mails/s",
            f"{rate[GUARDED]:,.0f}",
            f"{rate[UNGUARDED]:,.0f} unguarded / {ratio:.2f}",
            f">= {TARGET:.2f}",
            "yes" if ratio >= TARGET else "no",
        ),
        _row(
            "  ratio per round (* = disturbed, left out)",
            ", ".join(
                f"{x:.2f}{'' if (g, u) in clean else '*'}"
                for x, (g, u) in zip(per_round, rounds, strict=True)
            ),
            f"{len(clean)} of {ROUNDS} rounds; aggregate {aggregate:.2f}",
        ),
        _row(
            "guard's own time per mail, p50 (us)",
            us(own),
            "Guard.process - send - build_message",
        ),
        _row(
            "  limiter / ledger / other, p50 (us)",
            f"{us([t.get('acquire', 0) for t in g_t])} / {us(ledger)} / {us(other)}",
            "other: validate, render, outcome, log",
        ),
        _row(
            "  ledger "
            + " / ".join(f"{m} x{ledger_calls[m]:.0f}" for m in LEDGER_CALLS)
            + ", p50 (us)",
            " / ".join(us([t.get(f"ledger.{m}", 0) for t in g_t]) for m in LEDGER_CALLS),
            "begin_riding: claim, gates' reads and the decision in one EVALSHA; "
            "record: SET and DEL at once; summed over calls",
        ),
        _row(
            "build_message p50 (us), in both tasks",
            us([t["build"] for t in g_t]),
            f"{us([t['build'] for t in u_t])} unguarded",
        ),
        _row(
            "task body p50 (us)",
            us([t["total"] for t in g_t]),
            f"{us([t['total'] for t in u_t])} unguarded",
        ),
        _row(
            "task runtime p50 from worker log (us)",
            us(rt_g),
            f"{us(rt_u)} / +{(statistics.median(rt_g) - statistics.median(rt_u)) * 1e6:.0f}",
        ),
        _row("CPU ms/mail: worker main / pool / redis / bench", cpu(GUARDED), cpu(UNGUARDED)),
        _row(
            "redis commands per mail (all clients)",
            f"{commands[GUARDED]:.1f}",
            f"{commands[UNGUARDED]:.1f} / +{commands[GUARDED] - commands[UNGUARDED]:.1f}",
        ),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for n, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    print(
        f"({len(g_t)} + {len(u_t)} timed mails, {len(rt_g)} + {len(rt_u)} log runtimes, "
        f"{time.monotonic() - started:.0f} s in all; other processes on the machine used "
        f"{others:.2f} of {os.cpu_count()} cores during the batches"
        f"{': figures disturbed' if others > OTHERS_WARN else ''})"
    )
    print(
        "rounds (guarded, unguarded mails/s; other processes' cores): "
        + ", ".join(
            f"{BATCH / g.seconds:.0f}/{BATCH / u.seconds:.0f} ({g.load:.2f}/{u.load:.2f})"
            for g, u in zip(batches[GUARDED], batches[UNGUARDED], strict=True)
        )
    )


if __name__ == "__main__":
    main()
