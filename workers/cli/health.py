"""``mailguard health``: when each worker last consumed, and whether one has gone silent while
mail is due; for a systemd timer or a Kubernetes liveness probe.

Mail is due when the queue holds messages of any priority (on ``MAILGUARD_BROKER_URL``, or
``--broker``), the schedule holds an entry whose time has passed, or, with no worker running,
a worker took messages and never acknowledged them (Redis: kombu's ``unacked``; a countdown's
mail waiting for its slot in a worker since killed). A worker is **silent** when it has consumed
nothing (nor started) for ``--silent-for`` seconds; it is **gone** when its process has not
written its record for a while (:data:`workers.process.liveness.GONE`: killed, or its host down).
Exit 0 when nothing is due or every worker asked about consumes; 1 when one is silent while
mail is due, or none runs while mail is due (no record, or only gone ones), or the transport
is held (the relay refuses our own side: ``mailguard transport``); the same code as a
refusal: a probe need not tell them apart.
Records are in the ledger's Redis (:mod:`workers.process.liveness`); addresses are never printed.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

import click
from kombu import Connection
from kombu.exceptions import ChannelError

from mailer.durations import parse_duration
from mailer.errors import BackendUnavailable
from mailer.storage import is_memory
from workers.brokers import priority
from workers.brokers.redis_transport import redis_options, sentinel_form
from workers.cli import transport, views
from workers.cli.errors import USAGE, fail
from workers.cli.shared import shared_ledger_settings
from workers.process.liveness import Liveness, WorkerRecord
from workers.waiting.parking import schedule_for

#: ``--silent-for``'s default, in seconds: above a slow send's longest run (3 SMTP attempts
#: of 30 s), so a worker whose every process is sending is not taken for a hung one.
SILENT_FOR = 120.0


@dataclass(frozen=True)
class Verdict:
    """One worker's line: its record, how long it has been silent (s), and what is wrong
    (empty when nothing)."""

    record: WorkerRecord
    silent: float
    problem: str


def judge(
    records: list[WorkerRecord], *, due: bool, now: float, bound: float, worker: str | None
) -> tuple[list[Verdict], str]:
    """Each record's verdict (only ``worker``'s when given), and the command's problem: empty
    when healthy. A gone worker is only reported, unless it is the one asked about."""
    chosen = [r for r in records if worker is None or r.hostname == worker]
    verdicts = []
    for record in chosen:
        silent = record.silent_for(now)
        problem = ""
        if record.gone(now) and worker is None:
            problem = "gone"
        elif due and silent > bound:
            problem = "silent while mail is due"
        verdicts.append(Verdict(record, silent, problem))
    if not due:
        return verdicts, ""
    if worker is not None and not chosen:
        return verdicts, f"worker {worker} has no liveness record while mail is due"
    if bad := [v for v in verdicts if v.problem and v.problem != "gone"]:
        names = ", ".join(v.record.hostname for v in bad)
        return verdicts, f"{names}: consumed nothing for over {views.duration(bound)}, mail is due"
    if not any(v.problem == "" for v in verdicts):
        gone = ", ".join(v.record.hostname for v in verdicts if v.problem == "gone")
        named = f" (gone: {gone})" if gone else ""
        return verdicts, f"no running worker consumes the queue while mail is due{named}"
    return verdicts, ""


def queued(broker_url: str, queue: str) -> int | None:
    """Messages waiting in ``queue`` on ``broker_url``, every priority (None for a memory broker:
    unknown). On Redis kombu keeps one list per priority step: each is counted."""
    if is_memory(broker_url):
        return None
    with _connect(broker_url) as conn:
        channel: Any = conn.default_channel  # kombu's stubs leave queue_declare out
        missing: tuple[type[BaseException], ...] = (ChannelError, *conn.channel_errors)
        try:
            return int(channel.queue_declare(queue=queue, passive=True)[1])
        except missing:
            return 0  # no such queue (yet): nothing in it


def held(broker_url: str, queue: str) -> int | None:
    """Messages of ``queue`` a worker took and has not acknowledged (a countdown's mail waiting
    for its slot, or a run under way), on a Redis broker; None on another broker (RabbitMQ
    puts a dead consumer's messages back in the queue itself). A worker's sweep puts a dead
    worker's back after the visibility timeout: with no worker running they stay."""
    if priority.broker_scheme(sentinel_form(broker_url)[0]) not in priority.REDIS_SCHEMES:
        return None
    with _connect(broker_url) as conn:
        channel: Any = conn.default_channel
        with channel.conn_or_acquire() as client:
            entries = client.hvals(channel.unacked_key)
    return sum(1 for raw in entries if _routing_key(raw) == queue)


def _connect(broker_url: str) -> Connection:
    """A connection to ``broker_url`` with the workers' priority steps (Redis: ten lists);
    ``redis+sentinel://`` in kombu's form, with the master's name."""
    url, sentinel = sentinel_form(broker_url)
    options = redis_options(url, {**priority.transport_options(url), **sentinel})
    return Connection(url, connect_timeout=5.0, transport_options=options)


def _routing_key(raw: Any) -> str | None:
    """The routing key of kombu's unacked entry ``[message, exchange, routing_key]``."""
    try:
        return str(json.loads(raw)[2])
    except (TypeError, ValueError, IndexError, KeyError):
        return None


@click.command(short_help="When each worker last consumed; exit 1 if due mail is not consumed.")
@click.option("--worker", "worker", help="Only this worker's hostname (a probe's own).")
@click.option(
    "--silent-for",
    "silent_for",
    default=f"{int(SILENT_FOR)}s",
    show_default=True,
    help="How long a worker may consume nothing while mail is due.",
)
@click.option("--broker", help="The broker to count the queue on (default MAILGUARD_BROKER_URL).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def health(worker: str | None, silent_for: str, broker: str | None, as_json: bool) -> None:
    """When each worker last consumed a message, and whether mail is due (the queue holds
    messages of any kind, a parked mail's time has passed, or a gone worker held mails). Exit 1
    when a worker has consumed nothing for --silent-for while mail is due, or no worker runs
    (none has a record, or each is gone) while mail is due."""
    settings = shared_ledger_settings("workers' liveness")
    try:
        bound = parse_duration(silent_for)
    except ValueError as exc:
        fail(f"--silent-for: {exc}", USAGE)
    liveness = Liveness.from_url(settings.effective_ledger_url, queue=settings.queue)
    if liveness is None:  # refused by shared_ledger_settings already
        fail("the ledger is memory://: no worker's liveness is shared")
    try:
        records = liveness.read()
        upcoming = schedule_for(settings).next_due()
    except BackendUnavailable as exc:
        fail(str(exc))
    now = time.time()
    waiting, taken = _counts(broker or settings.broker_url, settings.queue)
    running = any(not r.gone(now) for r in records)
    due = bool(waiting) or (upcoming is not None and upcoming <= now) or bool(taken and not running)
    verdicts, problem = judge(records, due=due, now=now, bound=bound, worker=worker)
    problem = problem or transport.held_problem(settings)  # the relay refuses our own side
    _show(verdicts, (waiting, taken), upcoming, now, as_json=as_json, problem=problem)
    if problem:
        fail(problem)


def _counts(broker_url: str, queue: str) -> tuple[int | None, int | None]:
    try:
        return queued(broker_url, queue), held(broker_url, queue)
    except Exception as exc:  # any broker, any client: one line, not a traceback
        fail(f"cannot count the queue {queue!r} on the broker: {type(exc).__name__}: {exc}")


def _show(
    verdicts: list[Verdict],
    counts: tuple[int | None, int | None],
    upcoming: float | None,
    now: float,
    *,
    as_json: bool,
    problem: str,
) -> None:
    parked_due = upcoming is not None and upcoming <= now
    waiting, taken = counts
    if as_json:
        report: dict[str, Any] = {
            "queued": waiting,
            "held": taken,
            "schedule_due": parked_due,
            "workers": [
                asdict(v.record) | {"silent_for": v.silent, "problem": v.problem} for v in verdicts
            ],
            "problem": problem,
        }
        click.echo(json.dumps(report, indent=2))
        return
    count = "unknown (memory broker)" if waiting is None else str(waiting)
    holding = "" if taken is None else f", held {taken}"
    click.echo(f"queued {count}{holding}, schedule due {'yes' if parked_due else 'no'}")
    for v in verdicts:
        consumed = "never" if not v.record.consumed else views.when(v.record.consumed)
        click.echo(
            f"  {v.record.hostname:<30} consumed {consumed:<20} silent "
            f"{views.duration(v.silent):>8}  seen {views.duration(now - v.record.seen)} ago  "
            f"{v.record.broker}  {v.problem or 'ok'}"
        )
