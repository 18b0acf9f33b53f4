"""Newsletter benchmark: a provider quota and a burst of bulk mail. A program, not a test
(``make bench``; ``--mails 100000`` for the README's figures); prints one table.

``N`` (``--mails``, default 10 000) ``notice`` mails (share 0.5, ``MAILGUARD_KIND_NOTICE_SHARE``)
to ``N`` distinct readers are published in one burst, with ``--codes`` ``code`` mails (share
1.0, priority 9) to other readers among them, under each of:

- ``recipient: 1/60s, 5/1h, 10/24h; sender: 14/1s gcra``;
- ``recipient: 1/60s, 5/1h, 10/24h; sender: 14/1s`` (sliding);
- ``recipient: 1/60s, 5/1h, 10/24h`` alone, every reader given five sends first (so each mail
  is booked an hour ahead and parked): the floor the shared scope's bookings are compared with.

Each run has its own stack: one real worker (``celery -A workers.app worker``, prefork,
concurrency 2) on a redis-server holding the broker (db 1), the results (db 2), the ledger and
the schedule (db 0); the limiter on a redis-server of its own (AOF on, ``appendfsync no``,
nothing else on it but the holds' one read a mail), so that what that server counts is the
limiter's; and an SMTP server (aiosmtpd, a process of its own) that writes the time it accepts
each message, on its own clock. A notice may wait ``max(1 d, 3 N / 14 s)``: bulk mails take
half of 14/s, so the last is booked about ``N / 7`` s ahead.

**Booking phase**, measured in full: from the first publish until every mail has a result
(``DEFERRED`` while it waits, parked when more than ``MAILGUARD_PARK_AFTER`` ahead; ``SUCCESS``
once sent): **enqueue to parked**, mails/s, and against the recipient-only run on the same
kind of worker. **Redis time per limiter call**, inside Redis: a thread samples the limiter's
server (``INFO commandstats`` and ``persistence``, every 20 ms); over the first and the last
``--sample`` (1 000) script calls of the burst, the ``EVALSHA`` time divided by the calls (the
script's whole run on the server; ``NOSCRIPT`` refusals left out), the other commands per call
(the scripts' own calls, the holds' read) and the AOF bytes written per call. Script calls are
the burst's decisions plus, once sending starts, each booked mail's run asking for its slot.

**Sending phase**, over a bounded window: sends are watched from the first publish, through the
booking phase (sends go on meanwhile) and ``--window`` seconds (default 60) after it; then the
worker is stopped and every mail's result read. Checks, on the SMTP server's acceptances (its
own clock, every acceptance, codes included; an independent count):

- never over the sender tier: sliding ``14/1s``, at most 14 in any 1 s window; ``14/1s gcra``,
  at most a burst of 14 and then 14 a second (every span ``[a, b]`` of acceptances holds at most
  ``14 + 14 (b - a)``; its busiest 1 s window is shown too, and may pass 14 in a burst's first
  second, which gcra allows);
- every notice whose slot (as its result last says) came ``MARGIN`` s before the end was
  received, or is **late**: not received but still held (its payload in the schedule, or its
  message in the broker); none is **lost** (neither), none received twice, none before its slot;
- each code mail received within 1 s of its enqueue.

The pacing check forgives nothing by default (the provider's view): a run late by up to
``MAILGUARD_LATE_TOLERANCE`` keeps its slot, so sends may bunch by that much; ``--slack S``
forgives S seconds. Late mails and re-bookings (a run that started more than the tolerance after
its slot asks again) are figures, not checks; ``--bulk-priority 0 --park-after 5s`` publishes
the notices below their kind's priority and parks every booked mail, so that the mails coming
due (promoted at the kind's priority) go before the burst's rest. The program exits 1 when a
check fails, after the table. It stops by itself: the booking phase is bounded by
``--max-booking`` seconds (then reported unfinished, and nothing more is watched), the sending
by ``--window``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from benchmarks.limiter import _machine
from devservers.celery_worker import ROOT, CeleryWorker, client_app, worker_env
from devservers.ports import free_port
from devservers.redis_servers import RedisServer
from mailer import Limiter, Policy, defaults, parse_duration
from mailer.records.schedule import RedisSchedule
from mailer.records.schedule.ids import stored
from workers import tasks
from workers.brokers.priority import message_priority

RECIPIENT = "1/60s, 5/1h, 10/24h"
SENDER = "14/1s"
SHARE = 0.5
MARGIN = 2.0  # s: a mail due this long before the window's end must have been received
CODE_WITHIN = 1.0  # s from enqueue to acceptance, for each code mail
SAMPLE_EVERY = 0.02  # s between two samples of the limiter's server
POLL = 0.25  # s between two checks of the results
PREFILL = 5  # sends given to each reader before the recipient-only burst (5/1h: an hour ahead)
LIMITER_REDIS = ("--appendonly", "yes", "--appendfsync", "no", "--auto-aof-rewrite-percentage", "0")
SCRIPT_COMMANDS = ("cmdstat_evalsha", "cmdstat_eval")
NOT_COUNTED = ("cmdstat_info",)  # the sampler's own


# --- the SMTP server: its own process, its own clock -------------------------------------------


class _Acceptances:
    """aiosmtpd handler: writes ``<epoch seconds> <recipient>`` for each accepted message."""

    def __init__(self, out: Any) -> None:
        self.out = out

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        at = time.time()
        self.out.write("".join(f"{at:.6f} {rcpt}\n" for rcpt in envelope.rcpt_tos))
        self.out.flush()
        return "250 2.0.0 accepted"


def serve_smtp(port: int, path: str) -> None:
    """Run the recording SMTP server on 127.0.0.1:``port`` until SIGTERM."""
    from aiosmtpd.controller import Controller  # noqa: PLC0415 (only the server process needs it)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with open(path, "a", encoding="ascii") as out:
        controller = Controller(
            _Acceptances(out), hostname="127.0.0.1", port=port, ready_timeout=10.0
        )
        controller.start()
        while not stop.wait(0.2):
            pass
        controller.stop()


class SmtpRecorder:
    """The recording SMTP server as a subprocess; :meth:`received` reads what it accepted."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="mailguard-newsletter-smtp-"))
        self.path = self.dir / "accepted.txt"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> SmtpRecorder:
        self.path.touch()
        with open(self.dir / "server.log", "wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.newsletter",
                    "--serve-smtp",
                    str(self.port),
                    str(self.path),
                ],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the SMTP server did not start: {self.log()[-2000:]}")

    def log(self) -> str:
        return (self.dir / "server.log").read_text(errors="replace")

    def received(self) -> dict[str, list[float]]:
        """Acceptance times (epoch seconds, the server's clock) by recipient address."""
        out: dict[str, list[float]] = {}
        for line in self.path.read_text(encoding="ascii").splitlines():
            at, _, rcpt = line.partition(" ")
            out.setdefault(rcpt.lower(), []).append(float(at))
        return out

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


# --- the limiter's server, sampled -----------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """The limiter's server at one moment: counters since it started."""

    at: float  # epoch seconds, this process's clock
    calls: int  # script calls run (EVALSHA and EVAL; NOSCRIPT refusals left out)
    usec: int  # their time on the server, µs
    commands: int  # every other command run, the scripts' own calls included (INFO left out)
    written: int  # AOF bytes


def sample(client: redis.Redis) -> Sample:
    """One :class:`Sample` from ``client``'s server (one ``INFO`` call)."""
    info = client.execute_command("INFO", "commandstats", "persistence")
    calls = usec = commands = 0
    for name, stats in info.items():
        if not name.startswith("cmdstat_") or name in NOT_COUNTED:
            continue
        if name in SCRIPT_COMMANDS:
            calls += int(stats["calls"]) - int(stats.get("failed_calls", 0))
            usec += int(stats["usec"])
        else:
            commands += int(stats["calls"])
    return Sample(time.time(), calls, usec, commands, int(info["aof_current_size"]))


class Sampler:
    """A thread sampling a Redis server every :data:`SAMPLE_EVERY` seconds."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.samples = [sample(self.client)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            self.samples.append(sample(self.client))

    def stop(self) -> list[Sample]:
        """Stop sampling (once; again: nothing more) and return every sample, a last one taken
        now."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self.samples.append(sample(self.client))
            self.client.close()
        return self.samples


@dataclass(frozen=True)
class Cost:
    """What the limiter's server did per script call between two samples."""

    calls: int
    usec: float  # Redis time per call, µs
    commands: float  # other commands per call
    written: float  # AOF bytes per call
    seconds: float = 0.0  # between the two samples

    @classmethod
    def between(cls, a: Sample, b: Sample) -> Cost:
        n = max(b.calls - a.calls, 1)
        return cls(
            b.calls - a.calls,
            (b.usec - a.usec) / n,
            (b.commands - a.commands) / n,
            (b.written - a.written) / n,
            b.at - a.at,
        )


def burst_costs(samples: Sequence[Sample], start: float, end: float, k: int) -> tuple[Cost, Cost]:
    """The cost over the first ``k`` script calls after ``start`` and the last ``k`` before
    ``end`` (epoch seconds), each from the samples that bound them."""
    before = [s for s in samples if s.at <= start] or [samples[0]]
    first = before[-1]
    during = [s for s in samples if start < s.at <= end] or [samples[-1]]
    last = during[-1]
    head = next((s for s in during if s.calls - first.calls >= k), last)
    tail = [s for s in samples if s.at <= last.at and last.calls - s.calls >= k] or [first]
    return Cost.between(first, head), Cost.between(tail[-1], last)


# --- one run ---------------------------------------------------------------------------------


@dataclass
class Burst:
    """What was published: mail ids by address, code mails' enqueue times."""

    started: float
    published: float  # when the last message was handed to the broker
    bulk: dict[str, str] = field(default_factory=dict)  # address -> mail id
    codes: dict[str, tuple[str, float]] = field(default_factory=dict)  # address -> (id, at)

    @property
    def ids(self) -> list[str]:
        return [*self.bulk.values(), *(i for i, _ in self.codes.values())]


@dataclass
class Report:
    """One run's figures and checks."""

    name: str
    sender: str | None  # the sender tier (None: the recipient-only floor)
    mails: int
    booked: int = 0  # mails with a result when the booking phase ended
    booking_s: float = float("nan")  # first publish to every mail with a result
    publish_s: float = float("nan")
    first: Cost | None = None
    last: Cost | None = None
    states: dict[str, int] = field(default_factory=dict)  # sent/countdown/parked/dropped...
    observed_s: float = 0.0  # sends watched, from the first publish
    accepted: int = 0  # messages the SMTP server accepted
    due: int = 0  # mails whose slot came MARGIN s before the window's end
    late: int = 0  # due, not received, still held (schedule or broker): will run late
    lost: int = 0  # due, not received, held nowhere
    twice: int = 0  # received more than once
    early: int = 0  # received before their slot
    rebooked: int = 0  # mails whose run came late and asked again (deferrals > 1)
    #: notices whose slot is more than MAILGUARD_PARK_AFTER after the window's end: booked
    #: further ahead than that when decided (before the end), so parked; how many the
    #: schedule holds parked (its due set, read once the worker stopped), at their slot.
    far: int = 0
    far_parked: int = 0
    times: list[float] = field(default_factory=list, repr=False)  # acceptances, server's clock
    lateness: list[float] = field(default_factory=list, repr=False)  # s, acceptance - slot
    #: s the pacing check forgives (0: none, the provider's view): a run late by up to
    #: MAILGUARD_LATE_TOLERANCE keeps its slot, so mails may arrive that much closer.
    slack: float = 0.0
    codes: int = 0
    codes_received: int = 0
    code_worst: float = float("nan")  # s, enqueue to acceptance, the slowest code mail
    code_waited: int = -1  # code mails not sent at their first run (deferred or not sent)
    worker_errors: list[str] = field(default_factory=list)

    @property
    def limit(self) -> int:
        """The sender tier's count (per second here); 0 without one."""
        return int(self.sender.split("/")[0]) if self.sender else 0

    @property
    def gcra(self) -> bool:
        return bool(self.sender) and str(self.sender).endswith("gcra")

    @property
    def rate(self) -> float:
        """Enqueue to parked, mails/s."""
        return self.booked / self.booking_s if self.booked == self.mails else float("nan")

    @property
    def busiest(self) -> int:
        """The most acceptances in any 1 s window."""
        return busiest_window(self.times)

    @property
    def excess(self) -> float:
        """How many acceptances at worst the sender tier's promise leaves over (<= 0: none),
        ``slack`` forgiven: sliding, in any window of ``1 s - slack``; gcra, in any span
        ``[a, b]`` beyond ``limit + limit (b - a + slack)``."""
        if self.gcra:
            return gcra_excess(self.times, self.limit, slack=self.slack)
        return busiest_window(self.times, 1.0 - self.slack) - self.limit

    def over(self) -> bool:
        """Whether the acceptances broke the sender tier: a sliding tier promises at most
        ``limit`` in any 1 s window; a gcra tier a burst of ``limit``, then ``limit`` a second."""
        return self.excess > 1e-6

    def failures(self) -> list[str]:
        """The checks this run failed, one line each (the floor: only an unfinished booking)."""
        checks = {f"booking unfinished: {self.booked} of {self.mails}": self.booked < self.mails}
        if self.limit:
            checks |= {
                f"over the sender tier: {self.busiest} in one 1 s window, {self.excess:.1f} "
                f"over its promise (slack {self.slack:g} s), accepted after their slot "
                f"{_spread(self.lateness)}": self.over(),
                f"{self.lost} of {self.due} due mails lost": self.lost > 0,
                f"{self.twice} mails received twice": self.twice > 0,
                f"{self.far - self.far_parked} of {self.far} notices booked past the end not "
                "parked": self.far_parked < self.far,
                f"{self.early} mails received before their slot": self.early > 0,
                f"code mails: {self.codes_received} of {self.codes} received, slowest "
                f"{self.code_worst:.2f} s": self.codes_received < self.codes
                or not self.code_worst <= CODE_WITHIN,
                f"worker errors: {self.worker_errors[:3]}": bool(self.worker_errors),
            }
        return [f"{self.name}: {what}" for what, failed in checks.items() if failed]


def busiest_window(times: Sequence[float], width: float = 1.0) -> int:
    """The most of ``times`` in any half-open window ``[t, t + width)``."""
    ordered = sorted(times)
    most, lo = 0, 0
    for hi, t in enumerate(ordered):
        while t - ordered[lo] >= width:
            lo += 1
        most = max(most, hi - lo + 1)
    return most


def gcra_excess(
    times: Sequence[float], limit: int, width: float = 1.0, *, slack: float = 0.0
) -> float:
    """How far ``times`` break a gcra ``limit/width`` tier at worst, in mails (<= 0: never):
    the most, over every span ``[a, b]`` of them, of its count minus ``limit + (b - a + slack)
    / T`` (``T = width / limit``): a burst of ``limit``, then one every ``T``."""
    ordered = sorted(times)
    interval = width / limit
    worst, best_start = float("-inf"), float("-inf")
    for j, t in enumerate(ordered):
        # count(i..j) - (t_j - t_i) / T = (j + 1 - t_j / T) + (t_i / T - i): best i so far
        best_start = max(best_start, (t - ordered[0]) / interval - j)
        worst = max(worst, j + 1 - (t - ordered[0]) / interval + best_start - limit)
    return worst - slack / interval


def publish(app: Celery, mails: int, codes: int, tag: str, level: int | None = None) -> Burst:
    """Publish ``mails`` notices to distinct readers and ``codes`` code mails among them,
    through ``send_mail.apply_async`` (the enqueue check, the kind's priority), one producer.
    ``level`` (0-9): the notices' priority instead of their kind's."""
    send_mail = app.tasks[tasks.send_mail.name]
    options = {} if level is None else {"priority": message_priority(app.conf.broker_url, level)}
    every = max(1, mails // (codes + 1))
    burst = Burst(time.time(), 0.0)
    with app.producer_or_acquire() as producer:
        for n in range(mails):
            address = f"reader{n}@{tag}.example.com"
            result = send_mail.apply_async(
                args=[address],
                kwargs={"subject": "News", "body": "This month's news.", "kind": "notice"},
                producer=producer,
                **options,
            )
            burst.bulk[address] = result.id
            if len(burst.codes) < codes and (n + 1) % every == 0:
                address = f"code{len(burst.codes)}@{tag}.example.com"
                at = time.time()
                result = send_mail.apply_async(
                    args=[address],
                    kwargs={"kind": "code", "context": {"code": "493112"}},
                    producer=producer,
                )
                burst.codes[address] = (result.id, at)
    burst.published = time.time()
    return burst


def _chunks(items: Sequence[str], size: int = 2000) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def count_results(results: redis.Redis, ids: Sequence[str]) -> int:
    """How many of ``ids`` have a result (any state) in the result backend."""
    return sum(
        int(results.exists(*(f"celery-task-meta-{i}" for i in chunk))) for chunk in _chunks(ids)
    )


def read_results(results: redis.Redis, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each mail's stored result (``status`` and ``result``: the outcome dict), by id."""
    out: dict[str, dict[str, Any]] = {}
    for chunk in _chunks(ids):
        for mail_id, raw in zip(
            chunk, results.mget([f"celery-task-meta-{i}" for i in chunk]), strict=True
        ):
            out[mail_id] = json.loads(raw) if raw else {"status": "PENDING", "result": None}
    return out


def wait_booked(results: redis.Redis, burst: Burst, bound: float) -> tuple[int, float]:
    """Poll until every mail of ``burst`` has a result or ``bound`` seconds passed since its
    start: (mails with a result, when the last one appeared, epoch seconds). A chunk of ids
    whose results all exist is not asked about again."""
    pending = list(_chunks(burst.ids, 500))
    while True:
        still, partial = [], 0
        for chunk in pending:
            found = int(results.exists(*(f"celery-task-meta-{i}" for i in chunk)))
            if found < len(chunk):
                still.append(chunk)
                partial += found
        pending, now = still, time.time()
        if not pending or now - burst.started > bound:
            return len(burst.ids) - sum(len(c) for c in pending) + partial, now
        time.sleep(POLL)


@dataclass
class Stack:
    """Two redis-servers, the SMTP server and one worker, for one policy."""

    policy: str
    mails: int
    main: RedisServer = field(default_factory=RedisServer)
    limiter: RedisServer = field(default_factory=lambda: RedisServer(extra_args=LIMITER_REDIS))
    smtp: SmtpRecorder = field(default_factory=SmtpRecorder)
    worker: CeleryWorker | None = None
    env: dict[str, str] = field(default_factory=dict)  # the worker's MAILGUARD_* (given: added)

    def start(self) -> Stack:
        self.main.start()
        self.limiter.start()
        self.smtp.start()
        self.env = worker_env(
            self.main.url,
            self.smtp.url,
            MAILGUARD_POLICY=self.policy,
            MAILGUARD_LIMITER_URL=self.limiter.url,
            MAILGUARD_LEDGER_URL=self.main.url,
            MAILGUARD_KIND_NOTICE_SHARE=str(SHARE),
            MAILGUARD_KIND_NOTICE_MAX_WAIT=f"{max(86_400, 3 * self.mails // 14)}s",
            **self.env,
        )
        self.worker = CeleryWorker(self.env, name="newsletter", loglevel=None).start()
        return self

    def errors(self) -> list[str]:
        log = self.worker.log() if self.worker else ""
        return [line for line in log.splitlines() if "ERROR" in line or "Traceback" in line]

    def close(self) -> None:
        """Stop everything and remove the files it left (the worker's log, the acceptances)."""
        if self.worker is not None:
            self.worker.stop(timeout=30)
            shutil.rmtree(self.worker.log_path.parent, ignore_errors=True)
        self.smtp.stop()
        shutil.rmtree(self.smtp.dir, ignore_errors=True)
        self.limiter.cleanup()
        self.main.cleanup()


def _prefill(stack: Stack, addresses: Sequence[str]) -> None:
    """Give each address :data:`PREFILL` sends (the first now, the rest booked): under 5/1h its
    next mail is booked an hour ahead."""
    limiter = Limiter.from_url(
        stack.env["MAILGUARD_LIMITER_URL"],
        Policy.parse(RECIPIENT, name="recipient"),
        secret=stack.env["MAILGUARD_SECRET"],
    )
    try:
        for k in range(PREFILL):
            for chunk in _chunks(list(addresses), 1000):
                limiter.acquire_many(
                    chunk, mail_ids=[f"prefill-{k}-{a}" for a in chunk], max_wait=3600
                )
    finally:
        limiter.close()


_TASK_ID = re.compile(rb'"id": ?"([0-9a-f-]{36})"')


def held(main: redis.Redis, broker: redis.Redis, ids: Iterable[str]) -> set[str]:
    """Which of ``ids`` still wait somewhere once the worker stopped: a payload in the schedule
    (parked, promoting, or a countdown watched), or a message in the broker (a queue's list or
    the unacknowledged messages kombu restores)."""
    wanted = set(ids)
    if not wanted:
        return set()
    schedule = RedisSchedule(main, "redis://", queue="mail")  # the workers' (parking.py)
    found = {i for i in wanted if schedule.payload(i) is not None}
    for key in broker.scan_iter(count=1000):
        if key.startswith(b"mailguard:"):  # the outbox, beside the queues: not a place to run
            continue
        kind = broker.type(key)
        raws = broker.lrange(key, 0, -1) if kind == b"list" else []
        raws += broker.hvals(key) if kind == b"hash" else []
        for raw in raws:
            found |= {m.decode() for m in _TASK_ID.findall(raw)} & wanted
    return found


def parked_at(main: redis.Redis, slots: dict[str, float]) -> set[str]:
    """Which of ``slots`` (mail id -> slot, epoch seconds) the schedule holds parked, due
    within a millisecond of that slot (its shards' due sets)."""
    ids = list(slots)
    schedule = RedisSchedule(main, "redis://", queue="mail")
    pipe = main.pipeline(transaction=False)
    for i in ids:
        pipe.zscore(schedule.shard_of(i).due_key, stored(i))
    scores = pipe.execute() if ids else []
    return {
        i
        for i, ms in zip(ids, scores, strict=True)
        if ms is not None and abs(ms / 1000 - slots[i]) <= 1e-3
    }


def _sent_at_once(outcome: object) -> bool:
    """Whether ``outcome`` (a result's) is ``sent`` with no deferral: the limiter admitted the
    mail at its first run."""
    return (
        isinstance(outcome, dict)
        and outcome.get("status") == "sent"
        and not outcome.get("deferrals")
    )


def settle(
    report: Report,
    outcomes: dict[str, dict[str, Any]],
    burst: Burst,
    end: float,
    *,
    received: dict[str, list[float]],
    still: Callable[[Iterable[str]], set[str]],
    park_after: float = defaults.PARK_AFTER,
    parked: Callable[[dict[str, float]], set[str]] = lambda slots: set(),
) -> None:
    """The checks of one run from every mail's result, what the SMTP server accepted and
    ``still`` (which of the given mail ids still wait somewhere); ``end``: when sending
    stopped (epoch seconds); ``parked``: which of the given mail ids (with their slots) the
    schedule holds parked at that slot."""
    unreceived: list[str] = []
    far: dict[str, float] = {}
    for address, mail_id in burst.bulk.items():
        meta = outcomes[mail_id]
        outcome = meta.get("result") if isinstance(meta.get("result"), dict) else {}
        state = meta["status"] if meta["status"] != "SUCCESS" else outcome.get("status", "?")
        if state == "DEFERRED":
            state = "parked" if (outcome.get("wait") or 0) > park_after else "countdown"
        report.states[state] = report.states.get(state, 0) + 1
        report.rebooked += int((outcome.get("deferrals") or 0) > 1)
        slot = outcome.get("due") or outcome.get("decided_at") or burst.started
        times = received.get(address.lower(), [])
        report.lateness += [t - slot for t in times]
        report.twice += len(times) > 1
        report.early += sum(t < slot for t in times)
        if slot > end + park_after and state not in ("dropped", "failed"):
            far[mail_id] = slot
        if slot <= end - MARGIN and state not in ("dropped", "failed"):
            report.due += 1
            if not times:
                unreceived.append(mail_id)
    waiting = still(unreceived)
    report.late, report.lost = len(waiting), len(unreceived) - len(waiting)
    report.far, report.far_parked = len(far), len(parked(far))
    report.codes = len(burst.codes)
    waits = [
        min(received[a.lower()]) - at for a, (_, at) in burst.codes.items() if a.lower() in received
    ]
    report.codes_received = len(waits)
    report.code_worst = max(waits, default=float("nan"))
    report.code_waited = sum(
        1 for i, _ in burst.codes.values() if not _sent_at_once(outcomes.get(i, {}).get("result"))
    )
    report.twice += sum(len(received.get(a.lower(), [])) > 1 for a in burst.codes)
    report.times = sorted(t for times in received.values() for t in times)
    report.accepted = len(report.times)


def run(
    name: str,
    sender: str | None,
    mails: int,
    *,
    codes: int = 10,
    window: float = 60.0,
    sample_calls: int = 1000,
    max_booking: float = 1800.0,
    progress: bool = True,
    env: dict[str, str] | None = None,
    bulk_priority: int | None = None,
    slack: float = 0.0,
) -> Report:
    """One run on a fresh stack: ``sender`` is the sender tier (``None``: recipient only, every
    reader booked an hour ahead first, no code mails, no sending window); ``env``: more
    ``MAILGUARD_*`` for the worker; ``bulk_priority``: the notices' priority when published
    (0-9; None: their kind's, 5); ``slack``: seconds the pacing check forgives
    (:attr:`Report.slack`)."""
    policy = f"recipient: {RECIPIENT}" + (f"; sender: {sender}" if sender else "")
    report = Report(name, sender, mails, slack=slack)
    tag = "".join(c for c in name if c.isalnum())
    say = print if progress else lambda *_, **__: None
    with contextlib.ExitStack() as cleanup:
        stack = Stack(policy, mails, env=dict(env or {}))
        cleanup.callback(stack.close)
        stack.start()
        app = client_app(stack.env)
        cleanup.callback(app.close)
        # Results are read with a plain client: the publishing app subscribes to none of them.
        app.backend.on_task_call = lambda producer, task_id: None
        results = _client(cleanup, stack.env["MAILGUARD_RESULT_BACKEND"])
        if sender is None:
            _prefill(stack, [f"reader{n}@{tag}.example.com" for n in range(mails)])
            codes = 0
        sampler = Sampler(stack.limiter.url)
        cleanup.callback(sampler.stop)
        burst = publish(app, mails, codes, tag, bulk_priority)
        report.publish_s = burst.published - burst.started
        say(f"  {name}: {mails:,} published in {report.publish_s:.1f} s", flush=True)
        done, booked_at = wait_booked(results, burst, max_booking)
        report.booked = count_results(results, list(burst.bulk.values()))
        report.booking_s = booked_at - burst.started
        say(f"  {name}: {done:,} with a result after {report.booking_s:.1f} s", flush=True)
        if sender is not None and done == len(burst.ids):  # sending, after the booking
            time.sleep(max(0.0, booked_at + window - time.time()))
        stopped = time.time()
        assert stack.worker is not None
        stack.worker.stop(timeout=30)  # nothing more is sent: the window ends here
        report.observed_s = stopped - burst.started
        report.first, report.last = burst_costs(
            sampler.stop(), burst.started, booked_at, min(sample_calls, max(mails // 5, 1))
        )
        main_db = _client(cleanup, stack.main.url)
        broker = _client(cleanup, stack.env["MAILGUARD_BROKER_URL"])
        settle(
            report,
            read_results(results, burst.ids),
            burst,
            stopped,
            received=stack.smtp.received(),
            still=lambda ids: held(main_db, broker, ids),
            park_after=parse_duration(stack.env.get("MAILGUARD_PARK_AFTER", "30s")),
            parked=lambda slots: parked_at(main_db, slots),
        )
        report.worker_errors = stack.errors()
    return report


def _client(cleanup: contextlib.ExitStack, url: str) -> redis.Redis:
    """A Redis client on ``url``, closed when ``cleanup`` closes."""
    client = redis.Redis.from_url(url)
    cleanup.callback(client.close)
    return client


# --- the table --------------------------------------------------------------------------------


STATES = ("sent", "countdown", "parked", "dropped", "failed", "PENDING")


def _cost(r: Report, part: str, shape: str) -> str:
    """``first -> last (xratio)`` of one per-call figure."""
    if r.first is None or r.last is None:
        return "-"
    a, b = getattr(r.first, part), getattr(r.last, part)
    return f"{shape.format(a)} -> {shape.format(b)} (x{b / a:.1f})" if a else "-"


def _spread(values: Sequence[float]) -> str:
    """``p50 / p99 / max`` of ``values`` in seconds (``-`` for none)."""
    if not values:
        return "-"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return f"{statistics.median(ordered):.2f} / {p99:.2f} / {ordered[-1]:.2f} s"


def _pacing(r: Report) -> str:
    verdict = f"OVER by {r.excess:.1f}" if r.over() else "ok"
    promise = "gcra: a burst of the limit, then its rate" if r.gcra else f"limit {r.limit}"
    return f"{r.busiest} ({promise}): {verdict}"


def _rows(reports: Sequence[Report]) -> list[tuple[str, Callable[[Report], str]]]:
    """Each row's label and how to show it for one report (None: not measured for it)."""
    floor = next((r for r in reports if not r.limit and r.rate == r.rate), None)
    sending: list[tuple[str, Callable[[Report], str]]] = [
        ("sending watched, s from the first publish", lambda r: f"{r.observed_s:.0f}"),
        ("accepted by the SMTP server", lambda r: f"{r.accepted:,}"),
        ("most accepted in any 1 s window (server clock)", _pacing),
        (
            "due in the window: received / late / lost",
            lambda r: f"{r.due:,}: {r.due - r.late - r.lost:,} / {r.late} / {r.lost}",
        ),
        ("received twice / before their slot", lambda r: f"{r.twice} / {r.early}"),
        (
            "booked past the end + park-after: parked in the schedule",
            lambda r: f"{r.far_parked:,} of {r.far:,}",
        ),
        ("notices accepted after their slot, p50 / p99 / max", lambda r: _spread(r.lateness)),
        (
            "code mails received, slowest enqueue -> accepted",
            lambda r: f"{r.codes_received}/{r.codes}, {r.code_worst:.2f} s",
        ),
    ]
    rows: list[tuple[str, Callable[[Report], str]]] = [
        ("mails published / seconds", lambda r: f"{r.mails:,} / {r.publish_s:.1f} s"),
        (
            "booking: first publish -> every mail has a result",
            lambda r: (
                f"{r.booking_s:.1f} s"
                + ("" if r.booked == r.mails else f" ({r.booked:,} of {r.mails:,}: unfinished)")
            ),
        ),
        ("enqueue to parked, mails/s", lambda r: f"{r.rate:,.0f}"),
        (
            "  / recipient-only floor, same worker",
            lambda r: f"{r.rate / floor.rate:.2f}" if floor else "-",
        ),
        ("Redis µs per limiter call, first -> last", lambda r: _cost(r, "usec", "{:,.0f}")),
        (
            "  calls sampled, first / last",
            lambda r: f"{r.first.calls} / {r.last.calls}" if r.first and r.last else "-",
        ),
        ("Redis commands per call, first -> last", lambda r: _cost(r, "commands", "{:.1f}")),
        ("AOF bytes per call, first -> last", lambda r: _cost(r, "written", "{:,.0f}")),
        (
            "mails at the end: " + " / ".join(STATES),
            lambda r: " / ".join(f"{r.states.get(s, 0):,}" for s in STATES),
        ),
        ("  re-booked after a late run", lambda r: f"{r.rebooked:,}"),
    ]
    return rows + [
        (label, lambda r, show=show: show(r) if r.limit else "-")  # type: ignore[misc]
        for label, show in sending
    ]


def print_table(reports: Sequence[Report]) -> None:
    """The reports side by side, one row a measure (Markdown)."""
    print("\n| measure | " + " | ".join(r.name for r in reports) + " |")
    print("|---|" + "---|" * len(reports))
    for label, show in _rows(reports):
        print(f"| {label} | " + " | ".join(show(r) for r in reports) + " |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mails", type=int, default=10_000, help="notices in the burst")
    parser.add_argument("--codes", type=int, default=10, help="code mails among them")
    parser.add_argument("--window", type=float, default=60.0, help="s of sending watched")
    parser.add_argument("--sample", type=int, default=1000, help="script calls sampled")
    parser.add_argument("--max-booking", type=float, default=1800.0, help="s, at most")
    parser.add_argument(
        "--bulk-priority", type=int, help="publish the notices at this priority (0-9), not 5"
    )
    parser.add_argument("--park-after", help="MAILGUARD_PARK_AFTER for the worker (30s)")
    parser.add_argument(
        "--slack", type=float, default=0.0, help="s the pacing check forgives (0: none)"
    )
    parser.add_argument("--serve-smtp", nargs=2, metavar=("PORT", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_smtp:
        serve_smtp(int(args.serve_smtp[0]), args.serve_smtp[1])
        return 0
    print(
        f"newsletter benchmark: {args.mails:,} notices (share {SHARE}), {args.codes} code "
        f"mails; {_machine()}",
        flush=True,
    )
    options: dict[str, Any] = {
        "codes": args.codes,
        "window": args.window,
        "sample_calls": args.sample,
        "max_booking": args.max_booking,
        "bulk_priority": args.bulk_priority,
        "slack": args.slack,
        "env": {"MAILGUARD_PARK_AFTER": args.park_after} if args.park_after else None,
    }
    reports = [
        run(f"sender: {SENDER} gcra", f"{SENDER} gcra", args.mails, **options),
        run(f"sender: {SENDER}", SENDER, args.mails, **options),
        run("recipient only", None, args.mails, **options),
    ]
    print_table(reports)
    failures = [line for r in reports for line in r.failures()]
    print("\nchecks: " + ("all met" if not failures else "FAILED:\n  " + "\n  ".join(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
