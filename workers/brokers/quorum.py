"""RabbitMQ quorum queues for the mail (``MAILGUARD_QUEUE_TYPE=quorum``): replicated over a
cluster's nodes, with mailguard's priorities kept as lanes.

A quorum queue has no priorities on RabbitMQ 3.x (4.x: two levels), so the mail goes to one
quorum queue per priority lane, ``<queue>.p9``, ``<queue>.p5`` and ``<queue>.p0``: a mail
published at broker priority ``p`` goes to the highest lane at most ``p`` (:func:`lane_of`), all
through the exchange ``<queue>.lanes``. Every worker consumes the three lanes, each with a
prefetch of its own (RabbitMQ's per-consumer prefetch: Celery turns global QoS off on quorum
queues), so a mail published to a higher lane is delivered to a worker at once however long the
lower lanes are. The promise, tested: **a mail of a higher lane waits for the mails the workers
already hold (at most their concurrency per lane each), never for the backlog of a lower lane.**
Within a lane, mails go in arrival order (a deferred mail's "one step above its kind" counts
only where it changes the lane).

Each lane is declared with publisher confirms on (``confirm_publish``), an ``x-delivery-limit``
above ``MAILGUARD_POISON_AFTER`` (:func:`delivery_limit`: mailguard quarantines a mail
redelivered that often first; RabbitMQ 4 would otherwise drop it after 20) and a dead-letter
target, the quorum queue ``<queue>.dead`` (declared at worker start, consumed by nobody: read
it with ``rabbitmqctl list_queues``), so a mail over the limit is kept, not dropped.

A countdown (a deferred mail's next run) goes through Celery's native delayed delivery: the
lanes are bound to the topic exchange ``<queue>.lanes`` (its routing keys are the lanes' names)
and a worker binds them at start to Celery's ``celery_delayed_*`` exchanges, which hold the
message until it is due (to the second; the worker holds the rest). A worker cannot hold
countdowns itself on a quorum queue: without global QoS its prefetch cannot grow for them.
Not for a project's own app: its queues are its own (:mod:`workers.brokers.routing`).
"""

from __future__ import annotations

import logging
from typing import Any

from kombu import Exchange, Queue

from mailer.settings import Settings
from workers.brokers import routing
from workers.brokers.priority import AMQP_SCHEMES, broker_scheme

log = logging.getLogger("mailguard.worker")

#: The lanes' priorities, highest first: a mail of broker priority ``p`` goes to the first
#: lane at most ``p`` (9: ``code``; 5-8: ``default`` and deferred runs; 0-4: bulk kinds).
LANES = (9, 5, 0)
#: How far the delivery limit stands above ``MAILGUARD_POISON_AFTER``.
LIMIT_MARGIN = 5


def quorum_on(config: Settings) -> bool:
    """True when the mail queues are quorum queues: ``MAILGUARD_QUEUE_TYPE=quorum`` on AMQP."""
    return config.queue_type == "quorum" and broker_scheme(config.broker_url) in AMQP_SCHEMES


def lane_of(level: Any) -> int:
    """The lane of a mail published at broker priority ``level`` (None: the default's)."""
    level = 5 if not isinstance(level, int) else level
    return next((lane for lane in LANES if lane <= level), LANES[-1])


def lane_queue(queue: str, level: Any) -> str:
    """The name of the lane queue of ``queue`` a mail of priority ``level`` goes to."""
    return f"{queue}.p{lane_of(level)}"


def lanes_exchange(queue: str) -> str:
    """The lanes' exchange: a topic exchange (Celery's native delayed delivery binds to it)."""
    return f"{queue}.lanes"


def dead_queue(queue: str) -> str:
    """The dead-letter queue of ``queue``'s lanes: mails over the delivery limit."""
    return f"{queue}.dead"


def delivery_limit(config: Settings) -> int:
    """Deliveries RabbitMQ allows a mail before it dead-letters it: above mailguard's own
    quarantine (``MAILGUARD_POISON_AFTER``), so mailguard records the outcome first."""
    return config.poison_after + LIMIT_MARGIN


def lane_queues(config: Settings) -> tuple[Queue, ...]:
    """The lanes' declarations, highest first."""
    exchange = Exchange(lanes_exchange(config.queue), type="topic")
    arguments = {
        "x-queue-type": "quorum",
        "x-delivery-limit": delivery_limit(config),
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": dead_queue(config.queue),
    }
    return tuple(
        Queue(
            name := lane_queue(config.queue, lane),
            exchange,
            routing_key=name,
            queue_arguments=arguments,
        )
        for lane in LANES
    )


def dead_letters(config: Settings) -> Queue:
    """The dead-letter queue's declaration (a quorum queue on the default exchange)."""
    name = dead_queue(config.queue)
    return Queue(name, Exchange(""), routing_key=name, queue_arguments={"x-queue-type": "quorum"})


class LaneRouter:
    """A Celery router (``task_routes``): ``send_mail`` to its priority's lane queue. A
    message that names its routing key (a retry, from its delivery info) keeps it."""

    def __init__(self, queue: str, task_name: str) -> None:
        self.queue = queue
        self.task_name = task_name

    def __call__(
        self, name: str, args: Any, kwargs: Any, options: dict[str, Any], **_: Any
    ) -> dict[str, str] | None:
        if name != self.task_name:
            return None
        return {"queue": lane_queue(self.queue, options.get("priority"))}


def app_settings(config: Settings, task_name: str) -> dict[str, Any]:
    """The Celery settings of the lanes (none on a classic queue)."""
    if not quorum_on(config):
        return {}
    return {
        "task_queues": lane_queues(config),
        "task_default_queue": lane_queue(config.queue, None),
        "task_default_routing_key": lane_queue(config.queue, None),
        "task_default_queue_type": "quorum",
        "task_routes": (LaneRouter(config.queue, task_name),),
        "worker_detect_quorum_queues": True,
        routing.LOGICAL: config.queue,
        routing.LANES: tuple(queue.name for queue in lane_queues(config)),
    }


def declare_dead_letters(app: Any, config: Settings) -> None:
    """Declare the dead-letter queue on ``app``'s broker (at worker start; idempotent)."""
    if not quorum_on(config):
        return
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1)
            dead_letters(config).bind(connection.default_channel).declare()
    except Exception as exc:  # the broker's errors: the lanes dead-letter into nothing until then
        log.warning(
            "mailguard: the dead-letter queue %r is not declared: %s", dead_queue(config.queue), exc
        )
