"""Kind priorities on the broker: a code mail is taken before a waiting newsletter.

A kind's priority is 0-9, higher first (:attr:`mailer.mail.kinds.Kind.priority`). Each broker keeps
waiting messages per priority in its own way, and Celery passes ``priority`` through:

- **Redis**: kombu keeps one list per priority step and its consumer pops them in step order,
  lowest number first. mailguard sets ten steps (``priority_steps = 0..9``, one list each) and
  publishes a kind of priority ``p`` at ``9 - p``, so priority 9 is popped first.
- **RabbitMQ**: the mail queue is declared with ``x-max-priority: 9`` and a kind of priority
  ``p`` is published at ``p``. RabbitMQ cannot add that argument to an existing queue: a queue
  declared by an older version must be deleted (or ``MAILGUARD_QUEUE`` renamed) once.
- **RabbitMQ quorum queues** (``MAILGUARD_QUEUE_TYPE=quorum``): no ``x-max-priority``; one
  quorum queue per priority lane instead, the publish routed by ``p``
  (:mod:`workers.brokers.quorum`).
- **memory** (the in-process broker of the demo and of embedded defaults): a queue ordered by
  priority, higher first, then by arrival (:mod:`workers.brokers.memory`); ``p`` as is.

Priority orders what waits in the queue; it does not take a process from a mail being sent.
A deferred mail comes back (a countdown's retry, a parked mail's promotion, the watchdog's copy)
one step above its kind (:func:`booked_priority`): it holds a slot, so a burst of its own kind's
first runs still queued must not make it late (a late run is judged again, and may move back).
A mail of a higher kind still goes first.
"""

from __future__ import annotations

from typing import Any

from mailer import Kinds
from mailer.mail import DEFAULT_PRIORITY, MAX_PRIORITY

#: Broker URL schemes whose priorities are kombu's Redis transport's (lower number first).
REDIS_SCHEMES = ("redis", "rediss", "sentinel")
#: Broker URL schemes whose priorities are AMQP's (higher number first).
AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")


def broker_scheme(broker_url: str) -> str:
    """The URL's scheme in lower case (``redis``, ``amqp``...); "" for a URL without one."""
    return broker_url.split("://", 1)[0].lower() if "://" in broker_url else ""


def kind_priority(kinds: Kinds, kind: Any) -> int:
    """The priority of the kind named ``kind`` (the default's middle for one not known here)."""
    if isinstance(kind, str) and kind in kinds:
        return kinds[kind].priority
    return DEFAULT_PRIORITY


def booked_priority(level: int) -> int:
    """The kind priority a deferred mail of kind priority ``level`` is published again at: one
    step above its kind, at most :data:`MAX_PRIORITY`."""
    return min(level + 1, MAX_PRIORITY)


def message_priority(broker_url: str, priority: int) -> int:
    """The ``priority`` to publish a mail of kind priority ``priority`` with on this broker."""
    return MAX_PRIORITY - priority if broker_scheme(broker_url) in REDIS_SCHEMES else priority


def publish_priority(broker_url: str, kinds: Kinds, kind: Any, *, booked: bool = False) -> int:
    """The broker ``priority`` for a mail of kind ``kind``: its kind's for a first run, one step
    above for a deferred mail's next run (``booked``: :func:`booked_priority`)."""
    level = kind_priority(kinds, kind)
    return message_priority(broker_url, booked_priority(level) if booked else level)


def transport_options(broker_url: str) -> dict[str, Any]:
    """Broker transport options for priorities: one list per priority on Redis."""
    if broker_scheme(broker_url) in REDIS_SCHEMES:
        return {"priority_steps": list(range(MAX_PRIORITY + 1))}
    return {}


def broker_transport(broker_url: str) -> str | None:
    """The kombu transport to use instead of the URL scheme's: memory's with priorities."""
    if broker_scheme(broker_url) == "memory":
        return "workers.brokers.memory:Transport"
    return None


def queue_arguments(broker_url: str) -> dict[str, Any] | None:
    """The mail queue's declaration arguments: a priority queue on RabbitMQ."""
    if broker_scheme(broker_url) in AMQP_SCHEMES:
        return {"x-max-priority": MAX_PRIORITY}
    return None
