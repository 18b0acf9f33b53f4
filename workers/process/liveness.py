"""Each worker's liveness in the ledger's Redis: when it started, when it last consumed a
message, when its process was last seen, and the broker it consumes from.

One hash per queue, ``<ns>:{workers:<queue>}``, one field per worker hostname, a JSON record
(no address, no password: the broker is written as :func:`broker_identity`, a RabbitMQ
cluster by its name: :mod:`workers.brokers.cluster`). A worker writes
its record at start, when it consumed since the last write (at most once a second, not per
mail: a thread reads a time the consumer sets) and every ``MAILGUARD_LIVENESS_BEAT`` seconds
otherwise (at most :data:`BEAT`); it removes it when it stops. ``mailguard health``
(:mod:`workers.cli.health`) reads them.

The record also keeps the deployment whole: every worker of a queue parks into the queue's one
schedule, and a promoter publishes through its own app's broker, so workers of one queue that
consume from two brokers would hand each other's mails to a broker the sender's workers do not
read. :func:`conflict` names such a worker, and a worker refuses to start beside one
(:mod:`workers.app`).

Not for a memory ledger (an in-process worker): there is nothing to share.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from celery import bootsteps, signals

from mailer.errors import BackendUnavailable
from mailer.storage import RedisStore, client_from_url, is_memory
from workers.process import settings as process_settings

log = logging.getLogger("mailguard.worker")

#: Seconds between two writes of a worker's record while it consumes nothing.
BEAT = 5.0
#: A record whose process was not seen for this many seconds is of a worker that is gone.
GONE = 3 * BEAT
#: Records not seen for this many seconds are removed when a worker starts.
FORGOTTEN = 86_400.0

_LOOPBACK = {"localhost", "127.0.0.1", "::1", "0:0:0:0:0:0:0:1", "ip6-localhost"}
_DEFAULT_PORTS = {"redis": 6379, "rediss": 6379, "amqp": 5672, "amqps": 5671}
_SCHEMES = {"pyamqp": "amqp", "librabbitmq": "amqp", "amqp": "amqp"}

#: When this process's consumer last took a message (epoch seconds); set per message, cheap.
_consumed: list[float] = [0.0]


def broker_identity(url: str) -> str:
    """``url`` as the broker it names, whatever the spelling: scheme aliases (``pyamqp``),
    host case, loopback names (``localhost``, ``127.0.0.1``, ``::1``), default port, database
    (``/0`` or none) or virtual host; never the credentials or the query. Two names of one
    host (a DNS name and its address) stay two brokers."""
    try:
        parts = urlsplit(url.split(";", 1)[0].strip())
        scheme = parts.scheme.lower()
        scheme = _SCHEMES.get(scheme, scheme)
        host = (parts.hostname or "localhost").lower()
        port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
    except ValueError:
        return url.rsplit("@", 1)[-1]
    host = "localhost" if host in _LOOPBACK else host
    path = unquote(parts.path[1:]) if parts.path.startswith("/") else unquote(parts.path)
    if scheme.startswith("redis"):
        path = path.strip("/") or "0"
    elif scheme.startswith("amqp"):
        path = path or "/"
    return f"{scheme}://{host}:{port}/{path}" if scheme != "memory" else "memory://"


@dataclass(frozen=True)
class WorkerRecord:
    """One worker's liveness: epoch seconds (``consumed`` 0.0: nothing yet)."""

    hostname: str
    broker: str
    started: float
    seen: float
    consumed: float = 0.0

    def silent_for(self, now: float) -> float:
        """Seconds since it last consumed, or since it started if it never did."""
        return now - max(self.consumed, self.started)

    def gone(self, now: float) -> bool:
        """Its process was not seen for :data:`GONE` seconds (killed, or its host down)."""
        return now - self.seen > GONE


class Liveness:
    """The records of one queue's workers in the ledger's Redis. Every call raises
    ``BackendUnavailable`` when Redis is down."""

    def __init__(self, client: Any, url: str, *, queue: str, namespace: str = "mailguard") -> None:
        self._redis = RedisStore(client, url, backend="ledger")
        tag = "".join(c for c in queue if c not in "{}")
        self.key = f"{namespace}:{{workers:{tag}}}"

    @classmethod
    def from_url(cls, url: str, *, queue: str) -> Liveness | None:
        """The queue's records on the ledger ``url``; None for a memory ledger."""
        return None if is_memory(url) else cls(client_from_url(url), url, queue=queue)

    def write(self, record: WorkerRecord) -> None:
        self._redis.call(self._redis.client.hset, self.key, record.hostname, _encode(record))

    def forget(self, hostname: str) -> None:
        self._redis.call(self._redis.client.hdel, self.key, hostname)

    def read(self) -> list[WorkerRecord]:
        """Every record, by hostname; an unreadable one is skipped."""
        raw = self._redis.call(self._redis.client.hgetall, self.key)
        records = [_decode(value) for value in raw.values()]
        return sorted((r for r in records if r is not None), key=lambda r: r.hostname)

    def prune(self, now: float) -> None:
        """Remove the records not seen for :data:`FORGOTTEN` seconds."""
        for record in self.read():
            if now - record.seen > FORGOTTEN:
                self.forget(record.hostname)


def conflict(
    records: list[WorkerRecord], me: WorkerRecord, now: float, *, also: str = ""
) -> WorkerRecord | None:
    """A running worker of the same queue (another hostname, seen within :data:`GONE`) whose
    broker is neither ``me``'s nor ``also`` (another name of it), or None."""
    mine = {me.broker, also} - {""}
    for other in records:
        if other.hostname != me.hostname and not other.gone(now) and other.broker not in mine:
            return other
    return None


def _encode(record: WorkerRecord) -> str:
    return json.dumps(asdict(record), separators=(",", ":"))


def _decode(raw: Any) -> WorkerRecord | None:
    try:
        return WorkerRecord(**json.loads(raw))
    except (TypeError, ValueError):
        return None


@signals.task_received.connect
def _note_consumption(**_: Any) -> None:
    """The consumer took a message: only a time in memory (the writer thread sends it)."""
    _consumed[0] = time.time()


class Beat:
    """A thread that keeps ``record`` (this worker's) in ``liveness``: at once when the
    consumer took a message since the last write, checked every second; every ``beat`` seconds
    otherwise (``MAILGUARD_LIVENESS_BEAT``, at most :data:`BEAT`: a record unseen for
    :data:`GONE` is of a worker gone). Redis being down is logged once; the thread carries on."""

    def __init__(self, liveness: Liveness, record: WorkerRecord, *, beat: float = BEAT) -> None:
        self.liveness = liveness
        self.beat = beat
        self.record = record
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mailguard-liveness", daemon=True)
        self._down = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        with contextlib.suppress(BackendUnavailable):  # else it ends as a gone worker's record
            self.liveness.forget(self.record.hostname)

    def _run(self) -> None:
        written = 0.0
        while not self._stop.wait(1.0):
            now = time.time()
            consumed = _consumed[0]
            if consumed <= self.record.consumed and now - written < self.beat:
                continue
            self.record = WorkerRecord(**{**asdict(self.record), "seen": now, "consumed": consumed})
            try:
                self.liveness.write(self.record)
            except BackendUnavailable as exc:
                if not self._down:
                    log.warning("mailguard: liveness not written (ledger unavailable): %s", exc)
                self._down = True
                continue
            self._down, written = False, now


class LivenessStep(bootsteps.StartStopStep):
    """Runs a :class:`Beat` in the worker's main process while the worker runs (the record
    written at start by :mod:`workers.app`'s check, when the ledger is shared)."""

    label = "mailguard liveness"
    # After the pool has forked its processes (a thread alive at a fork may hold a lock the
    # child inherits locked), as the promoter.
    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.beat: Beat | None = None

    def start(self, worker: Any) -> None:
        if registered:
            liveness, record = registered[0]
            beat = min(process_settings.current().liveness_beat, BEAT)
            self.beat = Beat(liveness, record, beat=beat)
            self.beat.start()

    def stop(self, worker: Any) -> None:
        if self.beat is not None:
            self.beat.stop()
            self.beat = None

    def terminate(self, parent: Any) -> None:
        self.stop(parent)


#: This process's worker's store and record, once written at start (:func:`register`).
registered: list[tuple[Liveness, WorkerRecord]] = []


def register(
    liveness: Liveness, hostname: str, broker_url: str, now: float, *, identity: str | None = None
) -> str | None:
    """Write this worker's first record, unless a running worker of the queue consumes from
    another broker: then that worker's hostname and broker, in words, and nothing written.
    ``identity``: the broker as :mod:`workers.brokers.cluster` names it (default: the URL's)."""
    me = WorkerRecord(hostname, identity or broker_identity(broker_url), started=now, seen=now)
    liveness.prune(now)
    # A record naming the broker by its address (a worker whose node sent no cluster name)
    # is of the same broker as this one by its cluster name when the address is this one's.
    other = conflict(liveness.read(), me, now, also=broker_identity(broker_url))
    if other is not None:
        return f"worker {other.hostname} consumes from {other.broker}"
    liveness.write(me)
    registered[:] = [(liveness, me)]
    _consumed[0] = 0.0
    return None
