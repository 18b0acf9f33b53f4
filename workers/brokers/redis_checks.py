"""A worker's start refuses a broker that cannot work and warns of stores that lose data.

At ``worker_init`` (:func:`check_at_start`, wired in :mod:`workers.app`):

- a Redis Cluster broker (``redis+cluster://``, or a ``redis://`` URL that reaches a node with
  ``cluster_enabled:1``) is refused in one line: kombu has no Cluster transport (celery#2852).
  The limiter and the ledger on Cluster (``redis+cluster://``) stay supported;
- the broker's, the limiter's and the ledger's Redis (the schedule lives beside the ledger,
  the outbox on the ledger's server) are judged by :func:`mailer.redis_fitness.assess`: one
  that may evict keys is refused unless ``MAILGUARD_ALLOW_EVICTION=on`` (then warned), one
  without persistence is warned, one whose ``INFO``/``CONFIG`` is disabled is warned that the
  check was not made;
- a RabbitMQ quorum queue declared without a delivery limit above ``MAILGUARD_POISON_AFTER``
  is warned. AMQP cannot read a declared queue's arguments (a passive declare answers only its
  counts), so the check reads the queues the app declares (``app.amqp.queues``), not the server.

The result backend is not checked: outcomes are kept in the ledger as well.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from celery import signals

from mailer.redis_fitness import Role, assess
from mailer.settings import Settings
from mailer.settings_env import PREFIX
from mailer.storage import is_cluster, is_redis
from workers.brokers.priority import AMQP_SCHEMES, broker_scheme
from workers.brokers.redis_transport import sentinel_form

log = logging.getLogger("mailguard.worker")
BROKER = f"{PREFIX}BROKER_URL"


def check_at_start(config: Settings, worker: Any) -> None:
    """Refuse (``SystemExit``, one line) or warn (one log line each) for ``worker``'s broker and
    ``config``'s stores. SystemExit: Celery swallows exceptions raised by signal handlers."""
    app = worker.app
    broker = str(app.conf.broker_url or "")
    variable = (
        BROKER if broker == sentinel_form(config.broker_url)[0] else "the Celery app's broker_url"
    )
    options = dict(app.conf.broker_transport_options or {})
    urls = [url.strip() for url in broker.split(";")]
    for url in urls:
        if is_cluster(url):
            raise SystemExit(
                f"mailguard: {variable} is a Redis Cluster ({broker_scheme(url)}://), which "
                "cannot be a Celery broker (kombu has no Cluster transport, celery#2852); use "
                "a single Redis (or Sentinel) or RabbitMQ as the broker: the limiter and the "
                "ledger may stay on the cluster"
            )
    # kombu connects to the first URL it reaches; the others are fail-overs, not checked.
    first = next((form for url in urls if (form := redis_form(url, options))), None)
    roles = [] if first is None else [Role((variable,), first)]
    stores = (("LIMITER_URL", config.limiter_url), ("LEDGER_URL", config.ledger_url or ""))
    roles.extend(Role((PREFIX + name,), url) for name, url in stores if is_redis(url))
    found = assess(roles, allow_eviction=config.allow_eviction)
    if found.refusal is not None:
        raise SystemExit(f"mailguard: {found.refusal}")
    _pending[:] = [*found.warnings, *quorum_warnings(config, app)]
    if not hasattr(worker, "emit_banner"):  # an in-process worker: its logging is the caller's
        _warn()


#: The warnings of this start, logged once the worker's logging is set up.
_pending: list[str] = []


@signals.celeryd_after_setup.connect
def _warn(**_: Any) -> None:
    """Log the start's warnings, one line each, as the worker's own lines (``celery worker``
    sets its logging up after ``worker_init``: written earlier they would be bare text)."""
    for line in _pending:
        log.warning("mailguard: %s", line)
    _pending.clear()


def redis_form(broker_url: str, options: dict[str, Any]) -> str | None:
    """A kombu Redis broker URL in :func:`mailer.storage.client_from_url`'s form, or None for
    another broker (``redis+socket:///path``: ``unix:///path``; ``sentinel://h:p`` with a
    ``master_name`` transport option: ``redis+sentinel://h:p/<master_name>``)."""
    scheme = broker_scheme(broker_url)
    if scheme in ("redis", "rediss"):
        return broker_url
    if scheme == "redis+socket":
        return f"unix://{urlsplit(broker_url).path}"
    if scheme == "sentinel" and options.get("master_name"):
        netloc = urlsplit(broker_url).netloc
        return f"redis+sentinel://{netloc}/{options['master_name']}"
    return None


def quorum_warnings(config: Settings, app: Any) -> list[str]:
    """One line per quorum queue of ``app`` (RabbitMQ) whose delivery limit is unset or at most
    ``MAILGUARD_POISON_AFTER``: RabbitMQ would drop (4.0+: after 20 deliveries) or redeliver for
    ever (3.x) a mail before mailguard quarantines it as ``dropped`` / ``poison``."""
    if broker_scheme(str(app.conf.broker_url or "")) not in AMQP_SCHEMES:
        return []
    lines = []
    for queue in app.amqp.queues.values():  # as Celery declares them (task_default_queue_type)
        arguments = dict(queue.queue_arguments or {})
        if arguments.get("x-queue-type") != "quorum":
            continue
        limit = arguments.get("x-delivery-limit")
        if isinstance(limit, int) and limit > config.poison_after:
            continue
        shown = "no x-delivery-limit" if limit is None else f"x-delivery-limit {limit}"
        lines.append(
            f"the quorum queue {queue.name!r} is declared with {shown}: RabbitMQ 4 drops a "
            "message after 20 deliveries (the task stays PENDING), 3.x redelivers it for ever; "
            f"declare an x-delivery-limit above {PREFIX}POISON_AFTER ({config.poison_after}) "
            "and a dead-letter target (read from the app's queue definition: AMQP cannot read "
            "a declared queue's arguments)"
        )
    return lines
