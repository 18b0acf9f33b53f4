"""The Celery app: ``celery -A workers.app worker``. Configured from ``MAILGUARD_*`` variables.

With no environment at all it runs inside one process: a memory broker (start a worker in the
same process with :func:`workers.brokers.inprocess.inprocess_worker`), the memory limiter and the
console transport. Eager mode is not used: it ignores countdowns, which deferral relies on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from celery import Celery, current_task, signals
from kombu import Queue

from mailer import defaults, metrics
from mailer.errors import BackendUnavailable
from mailer.factory import build_guard, build_holds, build_reputation, build_warmup
from mailer.logs import JsonFormatter, in_utc
from mailer.records.warmup import WarmupCollector
from mailer.settings import Settings
from mailer.storage import is_memory
from workers.brokers import priority, quorum, redis_checks, routing
from workers.brokers.cluster import worker_broker
from workers.brokers.redis_transport import redis_options, sentinel_form, transport_for
from workers.polling.promoter import PromoterStep
from workers.process import settings as process_settings
from workers.process.failing_stop import FailingStopStep
from workers.process.liveness import Liveness, LivenessStep, register
from workers.run import state
from workers.waiting.parking import schedule_for

#: The bootsteps mailguard adds to every worker that runs ``send_mail``.
WORKER_STEPS = (PromoterStep, LivenessStep, FailingStopStep)

#: The environment's settings (:data:`workers.process.settings.env_settings`): the app is built
#: from them.
settings: Settings = process_settings.env_settings
log = logging.getLogger("mailguard.worker")
#: Why they are unusable (one line naming the variable), or None (:mod:`workers.process.settings`).
settings_error: str | None = process_settings.settings_error

#: Celery's broker connection settings: a connect gives up after 5 s (and is tried again), the
#: consumer retries for ever (a worker outlives a broker outage; ``mailguard health`` says when
#: it stops consuming), RabbitMQ heartbeats every 30 s (a dead peer found within a minute), and
#: the result backend's Redis sockets time out (5 s to connect, 30 s for a reply).
CONNECTION_SETTINGS: dict[str, Any] = {
    "broker_connection_retry_on_startup": True,
    "broker_connection_retry": True,
    "broker_connection_max_retries": None,
    "broker_connection_timeout": 5.0,
    "broker_heartbeat": 30,
    "redis_socket_connect_timeout": 5.0,
    "redis_socket_timeout": 30.0,
    "redis_socket_keepalive": True,
}


def transport_options(config: Settings) -> dict[str, Any]:
    """The broker's transport options: the visibility timeout, if set the restore sweep, behind
    Sentinel the master's name (:func:`~workers.brokers.redis_transport.sentinel_form`), and
    on Redis sockets that never block for minutes and a short restore lock
    (:func:`~workers.brokers.redis_transport.redis_options`)."""
    broker, sentinel = sentinel_form(config.broker_url)
    options: dict[str, Any] = redis_options(
        broker,
        {"visibility_timeout": config.visibility_timeout, **sentinel},
    )
    options.update(priority.transport_options(broker))
    if quorum.quorum_on(config):  # a quorum queue needs the publisher's confirms
        options["confirm_publish"] = True
    if config.restore_interval is not None:
        # kombu sweeps every ``interval`` s but scans only every ``throttle``-th sweep: scan each.
        options["unacked_restore_interval"] = config.restore_interval
        options["unacked_restore_throttle"] = 1
    return options


class MailguardApp(Celery):
    """Celery whose :meth:`close` also closes the result backend's connections: its client's
    pool and the subscription ``apply_async`` opens to hear of each result. Celery's own close
    leaves the backend alone, so those sockets stay open until they are collected. (The
    broker's connections are kombu's, pooled per broker URL for every app of the process.)"""

    def close(self) -> None:
        backend = self._backend  # type: ignore[attr-defined] # None: no result used yet
        if backend is not None:
            close_backend(backend)
        super().close()


def close_backend(backend: Any) -> None:
    """Close a result backend's connections, as far as it has any (a Redis backend's result
    subscription and client pool); never raises (the server may be gone)."""
    consumer = getattr(backend, "result_consumer", None)
    if consumer is not None and getattr(consumer, "_pubsub", None) is not None:
        with contextlib.suppress(Exception):
            consumer.stop()
            # Forgotten, so a result collected later does not subscribe anew to unsubscribe.
            consumer._pubsub = None
            consumer.subscribed_to.clear()
    client = vars(backend).get("client") if hasattr(backend, "__dict__") else None  # cached
    if client is not None:
        with contextlib.suppress(Exception):
            client.connection_pool.disconnect()


def create_app(config: Settings) -> Celery:
    """A Celery app for ``config`` with mailguard's safe defaults.

    It never makes itself the current app: a project's own app, when there is one, stays the
    app that ``send_mail.delay`` goes through (``send_mail`` is a shared task).
    """
    broker = sentinel_form(config.broker_url)[0]  # redis+sentinel:// in kombu's form
    backend, backend_sentinel = sentinel_form(config.result_backend)
    celery = MailguardApp("mailguard", broker=broker, backend=backend, set_as_current=False)
    celery.conf.update(
        include=["workers.tasks"],
        task_queues=(
            Queue(
                config.queue,
                routing_key=config.queue,
                queue_arguments=priority.queue_arguments(config.broker_url),
            ),
        ),
        task_default_queue=config.queue,
        task_default_routing_key=config.queue,
        # Never lose a mail: acknowledge after the run, requeue if the worker process dies.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # Take one message at a time: a worker must not hoard tasks others could run.
        worker_prefetch_multiplier=1,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        # No countdown may outlive the Redis broker's visibility timeout (no duplicate delivery).
        broker_transport_options=transport_options(config),
        broker_transport=priority.broker_transport(config.broker_url),
        result_backend_transport_options=backend_sentinel,  # behind Sentinel: the master's name
        result_expires=defaults.OUTCOME_TTL,
        **CONNECTION_SETTINGS,
        worker_hijack_root_logger=False,
        task_track_started=False,
        **{routing.MARK: True},  # send_mail's queue is this app's default one
    )
    celery.conf.update(quorum.app_settings(config, state.SEND_MAIL))  # lanes, on quorum
    # Every worker publishes parked mails when they are due (workers/polling/promoter.py), says when
    # it last consumed (workers/process/liveness.py) and ends after an unrecoverable error
    # (workers/process/failing_stop.py).
    for step in WORKER_STEPS:
        celery.steps["worker"].add(step)
    transport = transport_for(broker)
    if transport is not None:
        # kombu's Redis transport, with a broker restart no longer ending the worker.
        celery.conf.broker_transport = transport
    return celery


app = create_app(settings)
# The app ``send_mail`` goes through when the process has no app of its own (see workers.tasks).
app.set_default()


@signals.celeryd_init.connect
def _promote_on_every_app(sender: Any = None, instance: Any = None, **_: Any) -> None:
    """Run mailguard's steps (:data:`WORKER_STEPS`: the promoter, liveness, the failing stop)
    in any worker that runs ``send_mail``, a project's own app included, and give a Redis
    broker the socket options that cannot block for minutes where the app sets none.

    :func:`create_app` adds the steps to mailguard's app; a project's app that includes
    ``workers.tasks`` gets them here, before its worker builds its steps (without the promoter,
    mails parked through that app would wait for ever). ``steps`` is a set: adding twice is
    harmless.
    """
    app = getattr(instance, "app", None)
    if app is not None:
        for step in WORKER_STEPS:
            app.steps["worker"].add(step)
        broker = str(app.conf.broker_url)
        app.conf.broker_transport_options = redis_options(
            broker, dict(app.conf.broker_transport_options or {})
        )


@signals.worker_init.connect
def _consume_the_mail_queue(sender: Any = None, **_: Any) -> None:
    """Any app's worker that runs ``send_mail`` consumes ``MAILGUARD_QUEUE``, where the task
    publishes itself: added without ``-Q``, refused (one line) by a ``-Q`` that leaves it out
    (:func:`workers.brokers.routing.consume_mail_queue`)."""
    if sender is not None:
        routing.consume_mail_queue(sender, state.SEND_MAIL, process_settings.current().queue)


@signals.worker_init.connect
def _preflight(sender: Any = None, **_: Any) -> None:
    """Refuse to start on a bad configuration: one line naming the variable, exit 1.

    Settings are parsed and every part is built before the worker takes a mail: a malformed
    URL, a bad duration, an unknown kind option, a shared limiter without ``MAILGUARD_SECRET``.
    A backend that cannot be reached now is only logged: ``fail_closed`` covers it per mail.
    SystemExit, not an exception: Celery logs and swallows exceptions raised by signal handlers.
    """
    problems = [settings_error] if settings_error else settings.problems()
    if problems:
        raise SystemExit(f"mailguard: {problems[0]}")
    try:
        build_guard(settings, metrics=metrics.NO_METRICS)  # no metric objects before the fork
    except ValueError as exc:
        raise SystemExit(f"mailguard: {exc}") from None
    except Exception as exc:
        logging.getLogger("mailguard").warning(
            "mailguard: a backend is unreachable at start: %s", exc
        )


@signals.worker_init.connect
def _refuse_memory_limiter_in_prefork(sender: Any = None, **_: Any) -> None:
    """A memory limiter in a prefork pool of several processes would not limit: refuse to start.

    SystemExit, not an exception: Celery logs and swallows exceptions raised by signal handlers.
    """
    pool = str(getattr(sender, "pool_cls", ""))
    concurrency = int(getattr(sender, "concurrency", 1) or 1)
    if settings.limiter_url.startswith("memory:") and "prefork" in pool and concurrency > 1:
        raise SystemExit(
            "mailguard: MAILGUARD_LIMITER_URL is memory:// but the worker runs a prefork pool of "
            f"{concurrency} processes, each of which would limit on its own. Use a redis:// "
            "limiter, or --pool threads / --pool solo."
        )


@signals.worker_init.connect
def _redis_keeps_the_mail(sender: Any = None, **_: Any) -> None:
    """Refuse a Redis Cluster broker and a Redis that may evict keys, warn of one without
    persistence and of a quorum queue without a delivery limit
    (:mod:`workers.brokers.redis_checks`)."""
    if sender is not None:
        redis_checks.check_at_start(process_settings.current(), sender)
        quorum.declare_dead_letters(sender.app, process_settings.current())


@signals.worker_init.connect
def _one_broker_per_queue(sender: Any = None, **_: Any) -> None:
    """The queue's workers share one schedule and publish through their own broker: refuse to
    start beside a running worker of the queue that consumes from another broker (one line
    naming ``MAILGUARD_QUEUE``); else write this worker's liveness record. The ledger down:
    only logged."""
    config = process_settings.current()
    liveness = Liveness.from_url(config.effective_ledger_url, queue=config.queue)
    if sender is None or liveness is None:
        return
    broker = str(sender.app.conf.broker_url)
    hostname = str(getattr(sender, "hostname", "") or "worker")
    identity = worker_broker(sender.app)  # a RabbitMQ cluster by its name
    try:
        other = register(liveness, hostname, broker, time.time(), identity=identity)
    except BackendUnavailable as exc:
        log.warning("mailguard: the ledger is unreachable at start: %s", exc)
        return
    if other is not None:
        raise SystemExit(
            f"mailguard: this worker consumes from {identity} but {other}, "
            f"for the same MAILGUARD_QUEUE {config.queue!r} on the same ledger: their parked "
            "mails would be published to each other's broker; give one of them another "
            "MAILGUARD_QUEUE, or both the same broker"
        )


# Metrics (MAILGUARD_METRICS_PORT): every pool process records into files of its own in the
# multiprocess directory (set up here, before the pool forks); the main process serves their sum.
_metrics: dict[str, Any] = {}


@signals.worker_init.connect
def _serve_metrics(sender: Any = None, **_: Any) -> None:
    """Start the metrics server in the worker's main process, once (opt-in)."""
    if settings.metrics_port is None or _metrics:
        return
    directory, made = metrics.use_multiprocess_dir()
    try:
        server = metrics.serve(
            settings.metrics_host,
            settings.metrics_port,
            collectors=(
                *_schedule_gauges(),
                *_hold_gauges(),
                *_reputation_gauges(),
                *_warmup_gauges(),
            ),
        )
    except OSError as exc:
        if made:
            shutil.rmtree(directory, ignore_errors=True)
        raise SystemExit(
            f"mailguard: cannot serve metrics on {settings.metrics_host}:{settings.metrics_port} "
            f"(MAILGUARD_METRICS_PORT): {exc.strerror or exc}"
        ) from None
    _metrics.update(server=server, directory=directory if made else None, pid=os.getpid())


def _schedule_gauges() -> tuple[Any, ...]:
    """The schedule's gauges, when parking is on (read from the ledger's Redis per scrape)."""
    if settings.park_after is None:
        return ()
    return (metrics.ScheduleCollector(lambda: schedule_for(settings).stats()),)


def _hold_gauges() -> tuple[Any, ...]:
    """The sender's and the transport's hold gauges, when holds are on and shared (read from
    the limiter's Redis per scrape; memory holds live in each pool process, out of sight)."""
    if settings.throttle_hold is None or is_memory(settings.limiter_url):
        return ()
    holds = build_holds(settings)
    providers = holds.provider_holds if holds.providers is not None else None
    held = metrics.HoldCollector(holds.sender, transport=holds.transport.held, providers=providers)
    return (held, metrics.PaceCollector(holds.pace.rate_now))


def _reputation_gauges() -> tuple[Any, ...]:
    """Each sender's reputation gauges, when the reputation is on and shared."""
    reputation = build_reputation(settings)
    if reputation is None or is_memory(settings.effective_ledger_url):
        return ()
    return (metrics.ReputationCollector(reputation.standings, reputation.limits.thresholds),)


def _warmup_gauges() -> tuple[Any, ...]:
    """Each warm-up plan's gauges, when plans are on and shared (the limiter's Redis, read per
    scrape on this machine's clock)."""
    warmup = build_warmup(settings)
    if warmup is None or is_memory(settings.limiter_url):
        return ()
    return (WarmupCollector(warmup.standings),)


@signals.worker_process_shutdown.connect
def _pool_process_exited(pid: int | None = None, **_: Any) -> None:
    if settings.metrics_port is not None:
        metrics.process_exited(pid or os.getpid())


@signals.worker_shutdown.connect
def _stop_metrics(**_: Any) -> None:
    if _metrics.get("pid") != os.getpid():
        return
    _metrics.pop("server").shutdown()
    if (directory := _metrics.pop("directory")) is not None:
        shutil.rmtree(Path(directory), ignore_errors=True)
    _metrics.clear()


class WorkerJsonFormatter(JsonFormatter):
    """JSON lines, with the running task's id and name (as Celery's task format has them)."""

    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        task = current_task
        if task and getattr(task, "request", None) is not None and task.request.id:
            record.__dict__.setdefault("task_id", task.request.id)
            record.__dict__.setdefault("task_name", task.name)
        return super().fields(record)


@signals.after_setup_logger.connect
@signals.after_setup_task_logger.connect
def _json_logs(logger: logging.Logger | None = None, **_: Any) -> None:
    """``MAILGUARD_LOG_FORMAT=json``: the worker's log handlers write one JSON object a line;
    ``text``: Celery's lines, their times in UTC (:func:`mailer.logs.in_utc`)."""
    for handler in logger.handlers if logger is not None else ():
        if settings.log_format == "json":
            handler.setFormatter(WorkerJsonFormatter())
        elif handler.formatter is not None:
            in_utc(handler.formatter)


@signals.after_setup_logger.connect
def _mailguard_logs_at_info(logger: logging.Logger | None = None, **_: Any) -> None:
    """mailguard's own lines (logger ``mailguard``: deferred, parked, held, dropped, ...) are
    written at INFO whatever the worker's ``-l``.

    Runs once Celery has given the root logger its handler and level. When that level is above
    INFO and ``mailguard``'s level was not set by the project, ``mailguard`` gets INFO: its
    records still reach the root's handlers (propagation skips the root's level), so ``-l
    INFO`` or lower writes each line once as before. Should no root handler pass INFO, the
    logger gets a handler of its own (formatted like the root's first one) and stops
    propagating, so no line is written twice.
    """
    own = logging.getLogger("mailguard")
    if logger is None or own.level != logging.NOTSET or own.getEffectiveLevel() <= logging.INFO:
        return
    own.setLevel(logging.INFO)
    if any(h.level <= logging.INFO for h in logger.handlers) or own.handlers:
        return
    handler = logging.StreamHandler()
    if logger.handlers:
        handler.setFormatter(logger.handlers[0].formatter)
    elif settings.log_format == "json":
        handler.setFormatter(WorkerJsonFormatter())
    own.addHandler(handler)
    own.propagate = False


class _QuietDeferrals(logging.Filter):
    """Drops Celery's ``Task mailguard.send_mail[...] ignored`` line for a deferral: the run
    raised :class:`workers.tasks.Deferred`, and mailguard's own "deferred ... by" line says
    when and why. Other ignored tasks, and other ``send_mail`` lines, pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        data = getattr(record, "data", None)
        if not isinstance(data, dict) or data.get("description") != "ignored":
            return True
        return not (
            data.get("name") == state.SEND_MAIL and str(data.get("exc", "")).startswith("Deferred(")
        )


# Celery logs ignored runs through this logger (celery.app.trace: LOG_IGNORED, at INFO).
logging.getLogger("celery.app.trace").addFilter(_QuietDeferrals())


@signals.worker_ready.connect
def _ready_line(sender: Any = None, **_: Any) -> None:
    """One INFO line when the worker takes mail (Celery's own ``ready.`` line needs ``-l INFO``),
    on ``mailguard.worker``: the ``mailguard`` logger's lines are each about one mail."""
    hostname = getattr(sender, "hostname", None) or "worker"
    logging.getLogger("mailguard.worker").info("mailguard: %s ready.", hostname)
