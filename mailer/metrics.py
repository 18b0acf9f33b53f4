"""Prometheus metrics of the guard (prometheus-client), and the ``/metrics`` server a worker starts
(:func:`serve`); no Celery.

:class:`Metrics` holds the metric objects on one registry; the guard records every run into one
(by default :func:`default_metrics`, on prometheus-client's global registry; :data:`NO_METRICS`
records nothing). ``workers/app.py`` serves them when ``MAILGUARD_METRICS_PORT`` is set.

Metrics (labels are bounded: never the recipient, the mail id or a caller's unknown kind):

- ``mailguard_outcomes_total{kind,status,reason,tier}``: one per run of a mail, by its outcome.
  A mail booked twice then sent counts ``deferred`` twice and ``sent`` once (hops towards
  one booked slot are not runs that count); the mails
  finished are the ``sent``, ``dropped`` and ``failed`` series. ``reason`` is empty for a sent
  mail (``unguarded`` if sent while the limiter was down, ``fail_open``), ``tier`` is empty
  unless a tier bound the decision, and names its scope when that is not the recipient's
  (``5/1h``, ``sender 14/1s gcra``, ``tenant 100000/30d fixed``), as outcomes do. ``kind``
  is ``unknown`` for a kind not configured.
- ``mailguard_limiter_decision_seconds``: the limiter's ``acquire``, answered decisions only.
- ``mailguard_lateness_seconds{kind}``: ``sent_at - due`` of each mail sent after a deferral.
- ``mailguard_first_slot_lateness_seconds{kind}``: ``sent_at`` minus the first slot booked for
  the mail: what re-bookings (a late run, a worker outage) cost it in all.
- ``mailguard_rebookings_total{kind}``: runs later than their slot that asked the limiter again.
- ``mailguard_queue_wait_seconds{priority}``: from the moment a mail could run (its request,
  or its countdown's end) to the start of its run: the queue's wait, by the kind's priority.
- ``mailguard_backend_unavailable_total{backend}``: ``limiter`` or ``ledger`` calls that failed
  (``BackendUnavailable``).
- ``mailguard_holds_total{scope,cause}``: holds started after a throttling reply, by scope
  (``sender`` or ``recipient``) and cause (the reply's code and enhanced status, ``454 4.7.0``).
- ``mailguard_repeated_runs_total{kind}``: runs that found their mail already finished (a
  redelivery, or the same mail id sent again); not counted in the outcomes.
- ``mailguard_watchdog_republished_total``: booked mails held as countdowns that the watchdog
  published again from the schedule (no run seen within the grace after the countdown's end:
  a worker died, the broker lost the message, or it refused the countdown).
- ``mailguard_parked_mails``, ``mailguard_parked_overdue_seconds`` (gauges, read from the
  schedule at each scrape by :class:`ScheduleCollector`): mails parked in the schedule, and how
  long ago the earliest of them was due (0 when none is overdue: the promoters keep up).
- ``mailguard_sender_hold_seconds`` (gauge, read from the holds at each scrape by
  :class:`HoldCollector`): seconds left on the sender's hold (0: none in force).
- ``mailguard_sender_pace_rate`` (gauge, read from the holds at each scrape by
  :class:`PaceCollector`): the sender's learned rate after a hold, in mails/s (the slow start:
  :mod:`mailer.records.holds.pace`); 0 when no pace is in force.
- ``mailguard_transport_held`` (gauge, read by :class:`HoldCollector`): 1 while the transport
  is held (the relay refuses our own side: :mod:`mailer.records.holds.transport`), else 0.
- ``mailguard_reputation_rate{sender,rate}``, ``mailguard_reputation_paused{sender}``,
  ``mailguard_reputation_sent{sender}`` (gauges, read from the counters at each scrape by
  :class:`ReputationCollector`, with ``MAILGUARD_REPUTATION`` on): each sender's complaint and
  bounce rates over the window (fractions), whether its bulk kinds are paused (1) and its mails
  sent in the window; ``mailguard_reputation_threshold{rate}`` the thresholds.

prometheus-client is imported when the first :class:`Metrics` is built, so a worker can set
``PROMETHEUS_MULTIPROC_DIR`` (multiprocess mode) before that. In multiprocess mode every process
writes its values to files of its own in that directory (``<type>_<pid>.db``) and the server
(:func:`serve`, in one process) adds them up on each scrape: a prefork pool's children count
into one set of series, and a child that exits leaves its counts in.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mailer.clock import Clock, system_clock
from mailer.metrics_holds import HoldCollector as HoldCollector  # noqa: PLC0414
from mailer.metrics_holds import PaceCollector as PaceCollector  # noqa: PLC0414
from mailer.outcomes import Outcome

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

    from mailer.records.reputation import Standing, Thresholds
    from mailer.records.schedule import ScheduleStats

#: Seconds: one Redis round trip is about 0.1-0.5 ms on loopback; a timeout is seconds.
DECISION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5)
#: Seconds past the booked slot; the tests hold a deferred mail to its booking +-0.5 s.
LATENESS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: Seconds a runnable mail waited in the broker's queue for a worker.
QUEUE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)

UNKNOWN_KIND = "unknown"
UNGUARDED = "sent unguarded"  # the detail of a mail sent while the limiter was down


class Metrics:
    """The guard's metric objects, registered on ``registry`` (the global one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        from prometheus_client import REGISTRY  # noqa: PLC0415

        registry = REGISTRY if registry is None else registry
        self.registry = registry
        self.outcomes = _counter(
            registry,
            "mailguard_outcomes",
            "Runs of a mail by outcome (a deferred mail counts once per deferral).",
            ["kind", "status", "reason", "tier"],
        )
        self.decision_seconds = _histogram(
            registry,
            "mailguard_limiter_decision_seconds",
            "Time the limiter took to answer one acquire, in seconds.",
            [],
            DECISION_BUCKETS,
        )
        self.lateness_seconds = _histogram(
            registry,
            "mailguard_lateness_seconds",
            "Deferred mails that were sent: sent_at - due (the booked slot), in seconds.",
            ["kind"],
            LATENESS_BUCKETS,
        )
        self.first_slot_lateness = _histogram(
            registry,
            "mailguard_first_slot_lateness_seconds",
            "Booked mails that were sent: sent_at - the first slot booked for them, in seconds.",
            ["kind"],
            LATENESS_BUCKETS,
        )
        self.queue_wait_seconds = _histogram(
            registry,
            "mailguard_queue_wait_seconds",
            "From the moment a mail could run (request, or countdown's end) to its run, in s.",
            ["priority"],
            QUEUE_BUCKETS,
        )
        self._counters(registry)

    def _counters(self, registry: CollectorRegistry) -> None:
        """The counters of events other than outcomes."""
        self.unavailable = _counter(
            registry,
            "mailguard_backend_unavailable",
            "Limiter or ledger calls that failed: the backend could not be reached.",
            ["backend"],
        )
        self.rebookings = _counter(
            registry,
            "mailguard_rebookings",
            "Runs that started later than their booked slot and asked the limiter again.",
            ["kind"],
        )
        self.holds = _counter(
            registry,
            "mailguard_holds",
            "Holds started after a throttling reply, by scope and the reply's code.",
            ["scope", "cause"],
        )
        self.repeated = _counter(
            registry,
            "mailguard_repeated_runs",
            "Runs that found their mail already finished; nothing was sent again.",
            ["kind"],
        )
        self.republished = _counter(
            registry,
            "mailguard_watchdog_republished",
            "Booked mails the watchdog published again: no run seen after their countdown.",
            [],
        )

    def record(self, outcome: Outcome, kind: str) -> None:
        """Count one run's ``outcome``; ``kind`` is its bounded label (see :func:`kind_label`)."""
        reason = outcome.reason or ("unguarded" if outcome.detail == UNGUARDED else "")
        self.outcomes.labels(kind, outcome.status, reason, outcome.tier or "").inc()
        if (
            outcome.status == "sent"
            and outcome.deferrals
            and outcome.sent_at is not None
            and outcome.due is not None
        ):
            self.lateness_seconds.labels(kind).observe(outcome.sent_at - outcome.due)

    def decision(self, seconds: float) -> None:
        """One answered ``acquire`` took ``seconds``."""
        self.decision_seconds.observe(seconds)

    def after_first_slot(self, kind: str, seconds: float) -> None:
        """A booked mail was sent ``seconds`` after the first slot booked for it."""
        self.first_slot_lateness.labels(kind).observe(seconds)

    def queue_wait(self, priority: int, seconds: float) -> None:
        """A run started ``seconds`` after its mail could run (``priority``: the kind's, 0-9)."""
        self.queue_wait_seconds.labels(str(priority)).observe(max(seconds, 0.0))

    def backend_down(self, backend: str) -> None:
        """A call to ``backend`` (``limiter`` or ``ledger``) found it unavailable."""
        self.unavailable.labels(backend).inc()

    def repeat(self, kind: str) -> None:
        """A run found its mail already finished."""
        self.repeated.labels(kind).inc()

    def rebooked(self, kind: str) -> None:
        """A run was late for its slot and asked the limiter again."""
        self.rebookings.labels(kind).inc()

    def hold(self, scope: str, cause: str) -> None:
        """A hold of ``scope`` (sender or recipient) started; ``cause`` is a bounded label."""
        self.holds.labels(scope, cause).inc()

    def watchdog_republished(self) -> None:
        """The watchdog published a booked mail again (no run of it seen in time)."""
        self.republished.inc()


class NoMetrics(Metrics):
    """Records nothing (and never imports prometheus-client)."""

    def __init__(self) -> None:  # no metric objects
        pass

    def record(self, outcome: Outcome, kind: str) -> None:
        pass

    def decision(self, seconds: float) -> None:
        pass

    def after_first_slot(self, kind: str, seconds: float) -> None:
        pass

    def queue_wait(self, priority: int, seconds: float) -> None:
        pass

    def backend_down(self, backend: str) -> None:
        pass

    def repeat(self, kind: str) -> None:
        pass

    def rebooked(self, kind: str) -> None:
        pass

    def hold(self, scope: str, cause: str) -> None:
        pass

    def watchdog_republished(self) -> None:
        pass


NO_METRICS = NoMetrics()

_default: list[Metrics] = []  # at most one: a registry refuses a second metric of a name
_default_lock = threading.Lock()


def default_metrics() -> Metrics:
    """This process's metrics on prometheus-client's global registry, built on first use."""
    with _default_lock:
        if not _default:
            _default.append(Metrics())
        return _default[0]


MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def use_multiprocess_dir() -> tuple[Path, bool]:
    """Turn on prometheus-client's multiprocess mode; call it before any process records.

    Uses ``$PROMETHEUS_MULTIPROC_DIR`` (created if missing, its ``*.db`` files from a previous
    run removed) or a new temporary directory, which it exports in that variable for the
    processes forked or started afterwards. Returns the directory and whether it was created.
    """
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        directory, made = Path(given), False
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):
            stale.unlink(missing_ok=True)
    else:
        directory, made = Path(tempfile.mkdtemp(prefix="mailguard-metrics-")), True
        os.environ[MULTIPROC_ENV] = str(directory)
    if "prometheus_client.values" in sys.modules:
        # Already imported (by someone else): its value class was chosen without the variable.
        from prometheus_client import values  # noqa: PLC0415

        if not getattr(values.ValueClass, "_multiprocess", False):
            values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    return directory, made


class ScheduleCollector:
    """The schedule's gauges, read when scraped (one pipelined round trip per scrape).

    ``stats`` is :meth:`mailer.records.schedule.Schedule.stats`; a schedule that cannot be read
    yields no sample rather than failing the scrape.
    """

    def __init__(self, stats: Callable[[], ScheduleStats], clock: Clock = system_clock) -> None:
        self._stats = stats
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415

        try:
            stats = self._stats()
        except Exception:  # the scrape goes on without the schedule's figures
            return
        parked = GaugeMetricFamily("mailguard_parked_mails", "Mails parked in the schedule.")
        parked.add_metric([], stats.parked)
        yield parked
        overdue = GaugeMetricFamily(
            "mailguard_parked_overdue_seconds",
            "How long ago the earliest parked mail was due, in seconds (0: none overdue).",
        )
        due = stats.earliest_due
        overdue.add_metric([], 0.0 if due is None else max(self._clock() - due, 0.0))
        yield overdue


class ReputationCollector:
    """Each sender's reputation as gauges, read when scraped (judged: a pause whose rate fell
    back lifts here too) from :meth:`mailer.records.reputation.Reputation.standings`; counters
    that cannot be read yield no sample rather than failing the scrape."""

    def __init__(self, standings: Callable[[], list[Standing]], thresholds: Thresholds) -> None:
        self._standings = standings
        self._thresholds = thresholds

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415

        try:
            standings = self._standings()
        except Exception:  # the scrape goes on without the reputation
            return
        rate = GaugeMetricFamily(
            "mailguard_reputation_rate",
            "A sender's complaint or bounce rate over the window (a fraction of mails sent).",
            labels=["sender", "rate"],
        )
        paused = GaugeMetricFamily(
            "mailguard_reputation_paused",
            "1 while a sender's bulk kinds are paused by its reputation, else 0.",
            labels=["sender"],
        )
        sent = GaugeMetricFamily(
            "mailguard_reputation_sent", "Mails sent in the window.", labels=["sender"]
        )
        threshold = GaugeMetricFamily(
            "mailguard_reputation_threshold", "Pauses at (a fraction).", labels=["rate"]
        )
        for name, value in self._thresholds.items():
            threshold.add_metric([name], value)
        for standing in standings:
            for name in ("complaint", "bounce"):
                rate.add_metric([standing.sender, name], standing.rate(name))
            paused.add_metric([standing.sender], 1.0 if standing.paused else 0.0)
            sent.add_metric([standing.sender], standing.sent)
        yield from (rate, paused, sent, threshold)


def serve(host: str, port: int, collectors: tuple[Any, ...] = ()) -> Any:
    """Serve ``/metrics`` of every process writing to the multiprocess directory, on a thread,
    plus ``collectors`` (read at each scrape, in this process).

    Returns the server (``.shutdown()`` stops it); raises ``OSError`` if the port is taken.
    """
    from prometheus_client import CollectorRegistry, start_http_server  # noqa: PLC0415
    from prometheus_client.multiprocess import MultiProcessCollector  # noqa: PLC0415

    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    for collector in collectors:
        registry.register(collector)
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server


def process_exited(pid: int) -> None:
    """Bookkeeping for a process of the multiprocess directory that exited (live gauges)."""
    from prometheus_client import multiprocess  # noqa: PLC0415

    multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


def _counter(registry: CollectorRegistry, name: str, doc: str, labels: list[str]) -> Any:
    """A prometheus_client ``Counter`` on ``registry`` (imported only when metrics are built)."""
    from prometheus_client import Counter  # noqa: PLC0415

    return Counter(name, doc, labels, registry=registry)


def _histogram(
    registry: CollectorRegistry,
    name: str,
    doc: str,
    labels: list[str],
    buckets: tuple[float, ...],
) -> Any:
    """A prometheus_client ``Histogram`` on ``registry`` with ``buckets`` (seconds)."""
    from prometheus_client import Histogram  # noqa: PLC0415

    return Histogram(name, doc, labels, buckets=buckets, registry=registry)
