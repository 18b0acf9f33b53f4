"""The Celery app: ``celery -A workers.app worker``. Configured from ``MAILGUARD_*`` variables.

With no environment at all it runs inside one process: a memory broker (start a worker in the
same process with :func:`workers.inprocess.inprocess_worker`), the memory limiter and the
console transport. Eager mode is not used: it ignores countdowns, which deferral relies on.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, signals
from kombu import Queue

from mailer.settings import Settings

settings = Settings.from_env()


def transport_options(config: Settings) -> dict[str, Any]:
    """The broker's transport options: the visibility timeout and, if set, the restore sweep."""
    options: dict[str, Any] = {"visibility_timeout": config.visibility_timeout}
    if config.restore_interval is not None:
        # kombu sweeps every ``interval`` s but scans only every ``throttle``-th sweep: scan each.
        options["unacked_restore_interval"] = config.restore_interval
        options["unacked_restore_throttle"] = 1
    return options


def create_app(config: Settings) -> Celery:
    """A Celery app for ``config`` with mailguard's safe defaults."""
    celery = Celery("mailguard", broker=config.broker_url, backend=config.result_backend)
    celery.conf.update(
        include=["workers.tasks"],
        task_queues=(Queue(config.queue, routing_key=config.queue),),
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
        result_expires=7 * 86_400,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_track_started=False,
    )
    return celery


app = create_app(settings)


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
