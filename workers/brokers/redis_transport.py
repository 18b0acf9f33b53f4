"""The Redis broker transport, with kombu 5.7.0's broker-restart crashes contained.

When the broker's Redis goes away, Celery closes the connection, and kombu then still reaches
through the closed channel: to put the messages this worker holds (countdown mails waiting for
their slot) back on the queue, and to acknowledge a mail whose run ends after the loss. Both
fail in ``_connparams`` with ``AttributeError`` (``'NoneType' object has no attribute
'hostname'`` / ``'client'``); Celery does not expect it and the worker exits. Reproduced by
``tests/reliability/test_chaos.py`` (broker restart). :class:`_Contained` turns that into a
connection error, which kombu and Celery already handle.

Nothing needs restoring at that moment: the broker is unreachable, and every held message is
still in the broker's ``unacked`` hash, from which kombu's own sweep puts it back once its
visibility timeout has passed (mailguard derives that timeout; with an append-only broker the
hash survives the restart). So :class:`QoS` logs the failed restore and carries on, and the
worker reconnects. The ledger keeps a mail that comes back twice from being sent twice.

``workers.app`` selects these classes for ``redis://``, ``rediss://`` and
``sentinel://`` brokers (Celery's ``broker_transport``). A project with its own Celery app sets
``broker_transport = "workers.brokers.redis_transport:Transport"`` (``SentinelTransport`` for
Sentinel) to get the same. Other brokers (RabbitMQ) use their transport unchanged.

:data:`SOCKET_OPTIONS` are the transport options that keep a Redis broker's connections from
blocking for minutes (kombu's defaults wait for ever on a reply that never comes):
:data:`RESTORE_OPTIONS` keep a worker killed inside kombu's restore sweep from stopping the
other workers' sweeps for minutes. :func:`redis_options` adds both to an app's
``broker_transport_options`` where it sets none.
"""

from __future__ import annotations

import logging
import socket
from typing import Any
from urllib.parse import quote

from kombu.transport import redis
from kombu.utils.json import dumps
from redis.exceptions import ConnectionError as RedisConnectionError

from mailer.crashpoints import crash_point
from mailer.replica_ack import WAIT_MS, ReplicaWait
from mailer.storage import is_sentinel, parse_sentinel_url
from workers.brokers.priority import broker_scheme
from workers.outbox import ride as outbox_ride

log = logging.getLogger(__name__)

#: Broker URL schemes served by :class:`Transport` and :class:`SentinelTransport`.
REDIS_SCHEMES = ("redis", "rediss")
SENTINEL_SCHEMES = ("sentinel",)

#: A Redis broker's socket options (seconds). ``socket_connect_timeout``: a connect to a broker
#: that does not answer fails after it. ``socket_timeout``: a command whose reply does not come
#: (a broker frozen, a connection half open) fails after it; above kombu's ``BRPOP`` timeout
#: (1 s), under which a live broker always replies. ``socket_keepalive`` with probes after 30 s
#: idle, every 10 s, 3 missed: the kernel ends a dead peer's connection within a minute.
#: ``health_check_interval``: redis-py pings a connection idle that long before using it, and
#: kombu drops a ``BRPOP`` whose reply is overdue by it. ``retry_on_timeout`` off: a write that
#: timed out is not sent again (it may have been applied: the message would go twice), and
#: kombu batches the promoter's publishes only then.
SOCKET_OPTIONS: dict[str, Any] = {
    "socket_connect_timeout": 5.0,
    "socket_timeout": 15.0,
    "socket_keepalive": True,
    "socket_keepalive_options": {
        option: value
        for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))
        if (option := getattr(socket, name, None)) is not None
    },
    "health_check_interval": 10,
    "retry_on_timeout": False,
}

#: kombu's restore sweep (put back a message unacknowledged past the visibility timeout) runs
#: under a lock in the broker's Redis that expires after ``unacked_mutex_expire`` seconds.
#: kombu's 300 s means a worker killed inside the sweep stops every other worker's sweep for
#: five minutes; 30 s is plenty (a sweep restores at most 10 messages, one transaction each,
#: and a transaction restores a message once even when two sweeps overlap).
RESTORE_OPTIONS: dict[str, Any] = {"unacked_mutex_expire": 30}


class QoS(redis.QoS):
    """kombu's Redis QoS whose restore at close survives an unreachable broker."""

    def append(self, message: Any, delivery_tag: Any) -> None:
        crash_point("popped")  # BRPOP took it; kombu records it as unacknowledged next
        super().append(message, delivery_tag)

    def restore_unacked(self, client: Any = None) -> None:
        errors: tuple[type[BaseException], ...] = (
            AttributeError,
            *self.channel.connection.connection_errors,
        )
        try:
            super().restore_unacked(client)
        except errors as exc:
            held = len(self._delivered or ())
            if self._delivered is not None:
                self._delivered.clear()
            log.warning(
                "broker unreachable while closing: %d held message(s) stay in its unacked hash "
                "and come back after the visibility timeout (%s)",
                held,
                type(exc).__name__,
            )


class _Contained:
    """A channel whose transport is gone raises a connection error, not ``AttributeError``.

    After the broker connection is lost, kombu 5.7.0 still reaches through a closed channel to
    build a client (restoring held messages at close, acknowledging a mail whose run ended
    after the loss) and fails on ``self.connection`` being None. As a connection error, the
    restore is logged by :class:`QoS` and the ack by kombu itself ("Couldn't ack"); the message
    stays in the broker's unacked hash, comes back after the visibility timeout, and the ledger
    answers it without sending again.
    """

    connection: Any

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection is None or getattr(self.connection, "client", None) is None:
            raise RedisConnectionError("the broker channel is closed (connection lost)")
        return super()._connparams(asynchronous)  # type: ignore[misc]


class _OneClient:
    """One synchronous client per channel, made again whenever the channel's pool is.

    kombu 5.7 builds a new ``redis.Redis`` for every command it sends outside a pipeline (each
    publish: ``Redis.__init__`` copies its response callbacks, about 70 µs, a sixth of
    ``send_mail.delay``). The client holds nothing but the pool; the pool stays kombu's: a
    channel disconnected or closed makes a new one (:class:`_Contained` still refuses a closed
    channel's), and the next command gets a client on it.
    """

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[misc]
        pool = self.pool  # type: ignore[attr-defined]
        client = self.__dict__.get("_mailguard_client")
        if client is None or client.connection_pool is not pool:
            client = self.__dict__["_mailguard_client"] = super()._create_client()  # type: ignore[misc]
        return client


class _Rides:
    """A publish that carries the outbox entry of its mail in the same write
    (:mod:`workers.outbox.ride`), when one is offered and kombu publishes it alone."""

    _expires: Any

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        ride = outbox_ride.current()
        batched = kwargs.get("_publish_batch") is not None
        if ride is None or batched or (self._expires and queue in self._expires):
            return super()._put(queue, message, **kwargs)  # type: ignore[misc,no-any-return]
        pri = self._get_message_priority(message, reverse=False)  # type: ignore[attr-defined]
        key = self._q_for_pri(queue, pri)  # type: ignore[attr-defined]
        with self.conn_or_acquire() as client:  # type: ignore[attr-defined]
            if outbox_ride.push(client, ride, key, dumps(message)):
                return None
        return super()._put(queue, message, **kwargs)  # type: ignore[misc,no-any-return]


class Channel(_Rides, _OneClient, _Contained, redis.Channel):
    QoS = QoS


class Transport(redis.Transport):
    """``redis://`` broker transport (kombu's) with :class:`QoS`."""

    Channel = Channel


class _Acknowledged:
    """A publish behind Sentinel returns once a replica holds it: the ``LPUSH`` and
    ``WAIT 1`` on one connection (:mod:`mailer.replica_ack`), so a failover cannot lose a mail
    ``send_mail.delay`` answered for. None acknowledged while the master has a replica: a
    connection error (Celery's publish retry sends it again; the ledger answers a second copy
    without sending twice). A batched publish (the promoter's) is not waited on: its schedule
    entry is removed only after it, on the same master, so it cannot be lost alone."""

    _expires: Any
    priority_steps: Any

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        wait = self.__dict__.setdefault("_mailguard_wait", ReplicaWait())
        if kwargs.get("_publish_batch") is not None:
            return super()._put(queue, message, **kwargs)  # type: ignore[misc,no-any-return]
        pri = self._get_message_priority(message, reverse=False)  # type: ignore[attr-defined]
        with self.conn_or_acquire() as client:  # type: ignore[attr-defined]
            if not wait.needed(client):
                return super()._put(queue, message, **kwargs)  # type: ignore[misc,no-any-return]
            pipe = client.pipeline(transaction=False)
            pipe.lpush(self._q_for_pri(queue, pri), dumps(message))  # type: ignore[attr-defined]
            if self._expires and queue in self._expires:
                for step in self.priority_steps:
                    key = self._q_for_pri(queue, step)  # type: ignore[attr-defined]
                    pipe.pexpire(key, self._expires[queue])
            pipe.execute_command("WAIT", 1, WAIT_MS)
            wait.check(client, pipe.execute()[-1])
        return None


class SentinelChannel(_Acknowledged, _OneClient, _Contained, redis.SentinelChannel):
    QoS = QoS


class SentinelTransport(redis.SentinelTransport):
    """``sentinel://`` broker transport (kombu's) with :class:`QoS`; each publish returns once
    a replica holds it (:class:`_Acknowledged`)."""

    Channel = SentinelChannel


def redis_options(broker_url: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` (an app's ``broker_transport_options``) with :data:`SOCKET_OPTIONS` and
    :data:`RESTORE_OPTIONS` where it sets none, for a Redis or Sentinel broker; unchanged for
    another broker."""
    if broker_scheme(broker_url) not in (*REDIS_SCHEMES, *SENTINEL_SCHEMES):
        return options
    return {**SOCKET_OPTIONS, **RESTORE_OPTIONS, **options}


def sentinel_form(url: str) -> tuple[str, dict[str, Any]]:
    """For mailguard's ``redis+sentinel://[:password@]h1:p1,h2:p2/service[/db]`` (every role's
    one form, :func:`mailer.storage.parse_sentinel_url`): kombu's and Celery's form of it,
    ``sentinel://[:password@]h1:p1/db;sentinel://[:password@]h2:p2/db``, and the transport
    options that name the master (``{"master_name": service}``: a broker's
    ``broker_transport_options``, a result backend's ``result_backend_transport_options``).
    Any other URL is returned as it is, with no options. ``ValueError`` for a bad Sentinel URL."""
    if not is_sentinel(url):
        return url, {}
    parsed = parse_sentinel_url(url)
    auth = f":{quote(parsed.password, safe='')}@" if parsed.password else ""
    hosts = (f"[{h}]" if ":" in h else h for h, _ in parsed.sentinels)
    urls = (
        f"sentinel://{auth}{host}:{port}/{parsed.db}"
        for host, (_, port) in zip(hosts, parsed.sentinels, strict=True)
    )
    return ";".join(urls), {"master_name": parsed.service}


def transport_for(broker_url: str) -> str | None:
    """The ``broker_transport`` path for ``broker_url``, or None to keep kombu's choice."""
    scheme = broker_scheme(broker_url)
    if scheme in REDIS_SCHEMES:
        return f"{__name__}:Transport"
    if scheme in SENTINEL_SCHEMES:
        return f"{__name__}:SentinelTransport"
    return None
