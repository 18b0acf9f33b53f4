"""The outbox entry written in the broker's own publish: one write to Redis for both.

When the broker is a Redis server and the outbox is on the same server (the outbox then lives
in the broker's database: :func:`mailer.factory.outbox_url`), the entry of a mail's first
message (:mod:`workers.outbox.entries`) rides in the publish: the broker transport
(:class:`workers.brokers.redis_transport.Channel`) sends the outbox's ``EVALSHA`` and its own
``LPUSH`` in one write on its connection (with ``SELECT`` around the script only where a ledger URL
names its database in its query and the outbox stays there), then reads both answers. Redis runs
them in that order, so the entry is there before any worker can pop the message; and
``send_mail.delay`` pays one system call and one wake-up of the server instead of two.

A :class:`Ride` is handed to the transport through a context variable for the length of one
``apply_async``. Where the transport is not mailguard's, the servers differ (their host, port,
user or password), or kombu publishes some other way (a publish batch, a queue with an expiry),
nothing rides: the caller writes the entry itself (:func:`workers.outbox.entries.record`), before
the publish when it can tell in advance (:func:`possible`), after it otherwise.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import redis.exceptions
from redis.connection import parse_url

#: The connection settings that make two clients reach one server as one user.
_SERVER = ("host", "port", "username", "password", "path", "connection_class")
#: The broker transports that take a ride (``broker_transport`` paths).
_TRANSPORTS = ("workers.brokers.redis_transport:Transport",)


@dataclass
class Ride:
    """An outbox put (``command``, an ``EVALSHA``) for the server of ``server`` (connection
    settings), database ``db``. After the publish: ``sent`` when it went with it; ``lost`` the
    script's error answer (``NOSCRIPT``: the caller puts the entry itself) or None."""

    command: tuple[Any, ...]
    server: tuple[Any, ...]
    db: int
    sent: bool = False
    lost: Exception | None = field(default=None)


_current: ContextVar[Ride | None] = ContextVar("mailguard_outbox_ride", default=None)


def server_of(settings: dict[str, Any]) -> tuple[Any, ...]:
    """The server and user that connection ``settings`` (redis-py's) reach."""
    return tuple(settings.get(name) for name in _SERVER)


@functools.lru_cache(maxsize=64)
def possible(broker_url: str, broker_transport: str, outbox_url: str) -> bool:
    """Whether a publish to ``broker_url`` through ``broker_transport`` can carry an outbox put
    for the Redis at ``outbox_url``: mailguard's Redis transport, one server, one user."""
    if broker_transport not in _TRANSPORTS:
        return False
    try:
        broker, outbox = parse_url(broker_url), parse_url(outbox_url)  # type: ignore[no-untyped-call]
    except ValueError:
        return False
    fill = {"port": 6379, "username": None, "password": None}
    return server_of(fill | broker) == server_of(fill | outbox)


def ride_for(command: tuple[Any, ...], settings: dict[str, Any]) -> Ride:
    """A ride of ``command`` to the server and database of connection ``settings``."""
    return Ride(command, server_of(settings), int(settings.get("db") or 0))


@contextlib.contextmanager
def riding(ride: Ride | None) -> Iterator[None]:
    """Offer ``ride`` to the publishes inside the block (None: offer nothing)."""
    token = _current.set(ride)
    try:
        yield
    finally:
        _current.reset(token)


def current() -> Ride | None:
    """The ride offered to this publish and not yet sent, or None."""
    ride = _current.get()
    return None if ride is None or ride.sent else ride


def push(client: Any, ride: Ride, key: str, body: str) -> bool:
    """``LPUSH key body`` on ``client``'s server with ``ride``'s put ahead of it, in one write;
    False (nothing sent) when ``client`` reaches another server. Raises what the ``LPUSH`` or
    the connection raised; a put that failed (its script lost, the ledger's database refused)
    is kept in ``ride.lost``, for the caller to write it itself."""
    pool = client.connection_pool
    settings = pool.connection_kwargs
    if server_of(settings) != ride.server:
        return False
    db = int(settings.get("db") or 0)
    commands: list[tuple[Any, ...]] = [ride.command, ("LPUSH", key, body)]
    if db != ride.db:
        commands = [("SELECT", ride.db), ride.command, ("SELECT", db), ("LPUSH", key, body)]
    connection = pool.get_connection()
    try:
        connection.send_packed_command(connection.pack_commands(commands))
        replies = [_reply(connection) for _ in commands]
        selects = replies[0::2] if db != ride.db else []
        refused = [reply for reply in selects if isinstance(reply, Exception)]
        if refused:  # the connection's database is uncertain: it connects again when next used
            connection.disconnect()
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)
    if isinstance(replies[-1], Exception):
        raise replies[-1]
    ride.sent = True
    put = replies[-3] if db != ride.db else replies[0]
    ride.lost = refused[0] if refused else put if isinstance(put, Exception) else None
    return True


def _reply(connection: Any) -> Any:
    """The next answer on ``connection``; an error answer returned, not raised."""
    try:
        return connection.read_response()
    except redis.exceptions.ResponseError as exc:
        return exc.with_traceback(None)  # no frames kept alive with it
