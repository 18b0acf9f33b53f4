"""Which broker a worker consumes from, as the deployment sees it: a RabbitMQ cluster by its
name, any other broker by its address (:func:`workers.process.liveness.broker_identity`).

Workers of one queue must consume from one broker (:mod:`workers.process.liveness`). The nodes of
one RabbitMQ cluster are one broker: a worker whose fail-over list (``amqp://a;amqp://b``) starts at
another node of the same cluster is beside the others, not on another broker. A RabbitMQ node
says its cluster's name in the connection's server properties (``cluster_name``: set it with
``rabbitmqctl set_cluster_name``, else it is the first node's name); the identity is then
``rabbitmq-cluster:<name>/<vhost>``. Read once at worker start (one connection).
"""

from __future__ import annotations

import logging
from typing import Any

from workers.brokers.priority import AMQP_SCHEMES, broker_scheme
from workers.process.liveness import broker_identity

log = logging.getLogger("mailguard.worker")


def cluster_identity(cluster_name: str, broker_url: str) -> str:
    """The identity of the virtual host of ``broker_url`` on the cluster ``cluster_name``."""
    vhost = broker_identity(broker_url).split("/", 3)[-1]
    return f"rabbitmq-cluster:{cluster_name}/{vhost}"


def worker_broker(app: Any) -> str:
    """The identity of ``app``'s broker: its RabbitMQ cluster's, when a node of its fail-over
    list answers with a cluster name; else the first URL's address (a broker down: logged)."""
    url = str(app.conf.broker_url or "")
    if broker_scheme(url) not in AMQP_SCHEMES:
        return broker_identity(url)
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1)
            name = connection.connection.server_properties.get("cluster_name")
    except Exception as exc:  # the broker's errors: its address stands in
        log.warning("mailguard: the broker's cluster name is unknown: %s", exc)
        return broker_identity(url)
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    return cluster_identity(name, url) if isinstance(name, str) and name else broker_identity(url)
