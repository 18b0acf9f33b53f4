"""Whether a Redis server can keep what mailguard stores in it: read at a worker's start.

A Redis that evicts keys under memory pressure (``maxmemory-policy`` other than ``noeviction``)
deletes queued and parked mail, claims, outbox entries and limiter bookings (each has a TTL, so
even the ``volatile-*`` policies take them); one without persistence (``appendonly no`` and no
RDB ``save`` points) loses them all when it restarts; a Redis Cluster node reached with a plain
``redis://`` URL answers ``MOVED`` for most keys. :func:`read_servers` reads each server's
facts (``INFO``, and ``CONFIG GET save`` when the append-only file is off) and :func:`assess`
turns the facts of every role into one refusal, or warnings of one line each.

Celery-free: the broker's URL is given in redis-py's form by :mod:`workers.brokers.redis_checks`.
A server that renamed ``INFO`` or ``CONFIG`` (managed services do) or cannot be reached is
never a refusal: its check is reported as not made.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import redis.exceptions

from mailer.errors import mask_url
from mailer.settings_env import PREFIX
from mailer.storage import REDIS_DOWN, client_from_url, is_cluster

#: The only ``maxmemory-policy`` that never deletes a key mailguard wrote.
NOEVICTION = "noeviction"
#: The setting that turns the eviction refusal into a warning.
ALLOW_EVICTION = f"{PREFIX}ALLOW_EVICTION"
#: What is lost when a server drops keys, as the lines say it.
_AT_STAKE = "queued and parked mail, claims, outbox entries and bookings"
#: What a ``volatile-*`` policy may evict: the keys with a TTL (queues and the schedule have none).
_WITH_TTL = "claims, outbox entries and bookings"


def evicted(policy: str) -> str:
    """What ``policy`` may delete of mailguard's keys under memory pressure."""
    return _WITH_TTL if policy.startswith("volatile") else _AT_STAKE


@dataclass(frozen=True)
class Role:
    """A store of a worker on Redis: the variables that name it and its URL (redis-py's form)."""

    variables: tuple[str, ...]
    url: str


@dataclass(frozen=True)
class Server:
    """What one Redis server told about itself (None: not known, see :attr:`unread`)."""

    address: str
    #: The server's ``run_id`` (two roles on one server are reported together), else address.
    identity: str
    cluster_node: bool | None = None
    eviction_policy: str | None = None
    append_only: bool | None = None
    save_points: str | None = None
    #: Why something could not be read ("INFO is disabled", "unreachable: ..."), else "".
    unread: str = ""


@dataclass
class Assessment:
    """The refusal (one line naming the variables) and the warnings (one line each)."""

    refusal: str | None = None
    warnings: list[str] = field(default_factory=list)


def read_servers(url: str) -> list[Server]:
    """The facts of the server at ``url``; of each primary for a ``redis+cluster://`` URL."""
    where = address(url)
    try:
        client = client_from_url(url)
    except (ValueError, redis.exceptions.RedisError) as exc:
        return [Server(where, where, unread=f"unreachable: {exc}")]
    try:
        if not is_cluster(url):
            return [read_server(client, where)]
        return [
            read_server(node.redis_connection, f"{node.host}:{node.port}")
            for node in client.get_primaries()
        ]
    except REDIS_DOWN as exc:
        return [Server(where, where, unread=f"unreachable: {exc}")]
    finally:
        with contextlib.suppress(Exception):
            client.close()


def address(url: str) -> str:
    """Where ``url`` points, as the lines show it: ``host:port``, a socket's path, or the
    URL without its password (Sentinel)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    if parts.scheme in ("redis", "rediss"):
        return parts.netloc.rpartition("@")[2] or "localhost:6379"
    return mask_url(url)


def read_server(client: Any, where: str) -> Server:
    """The facts of the server ``client`` talks to (``where`` names it in the lines).

    Raises :data:`~mailer.storage.REDIS_DOWN` when it cannot be reached.
    """
    try:
        info = client.info()
    except redis.exceptions.ResponseError:  # renamed, or an ACL without +info
        return Server(where, where, unread="INFO is disabled")
    policy = info.get("maxmemory_policy")
    append_only = info.get("aof_enabled")
    server = Server(
        where,
        str(info.get("run_id") or where),
        cluster_node=bool(info.get("cluster_enabled")),
        eviction_policy=None if policy is None else str(policy),
        append_only=None if append_only is None else bool(append_only),
        unread="its INFO has no maxmemory_policy" if policy is None else "",
    )
    if server.append_only is not False:
        return server
    try:
        save = client.config_get("save").get("save")
    except redis.exceptions.ResponseError:
        unknown = "CONFIG is disabled, its RDB save points are unknown"
        return replace(server, unread=", ".join(filter(None, (server.unread, unknown))))
    return replace(server, save_points=str(save or ""))


def assess(roles: Sequence[Role], *, allow_eviction: bool) -> Assessment:
    """Read every role's servers and judge them: a Cluster node behind a plain URL and an
    evicting server are refused (eviction only warned with ``allow_eviction``); no persistence
    and a check not made are warned, one line each for all servers."""
    return judge(
        [(role, server) for role in roles for server in read_servers(role.url)],
        allow_eviction=allow_eviction,
    )


def judge(found: Iterable[tuple[Role, Server]], *, allow_eviction: bool) -> Assessment:
    """:func:`assess` on facts already read (each role with each server it is on)."""
    servers: dict[str, tuple[Server, list[str], list[Role]]] = {}
    for role, server in found:
        _, variables, roles = servers.setdefault(server.identity, (server, [], []))
        variables.extend(v for v in role.variables if v not in variables)
        roles.append(role)
    result = Assessment()
    refusals: list[str] = []
    evicting, volatile, unread, lost = [], [], [], _WITH_TTL
    for server, variables, roles in servers.values():
        where = f"the Redis at {server.address} ({', '.join(variables)})"
        if server.unread:
            unread.append(f"{where}: {server.unread}")
        if server.cluster_node and not all(is_cluster(role.url) for role in roles):
            refusals.append(_cluster_refusal(server, variables))
        if server.eviction_policy not in (None, NOEVICTION):
            evicting.append(f"{where} has maxmemory-policy {server.eviction_policy}")
            lost = max(lost, evicted(server.eviction_policy), key=len)
        if server.append_only is False and server.save_points == "":
            volatile.append(where)
    if evicting and not allow_eviction:
        refusals.append(
            f"{'; '.join(evicting)}: under memory pressure it deletes {lost}; run "
            f"CONFIG SET maxmemory-policy {NOEVICTION} there (and in its redis.conf), or set "
            f"{ALLOW_EVICTION}=on to start with a warning"
        )
    elif evicting:
        result.warnings.append(
            f"{ALLOW_EVICTION}=on: {'; '.join(evicting)}, so it may delete {lost} under "
            f"memory pressure (CONFIG SET maxmemory-policy {NOEVICTION} keeps them)"
        )
    if volatile:
        result.warnings.append(
            f"no persistence on {'; '.join(volatile)}: appendonly no and no RDB save points, "
            f"so a restart of it loses {_AT_STAKE}; CONFIG SET appendonly yes (and in its "
            "redis.conf) keeps them"
        )
    if unread:
        result.warnings.append(
            "could not check that Redis keeps mailguard's keys (maxmemory-policy, persistence) "
            f"on {'; '.join(unread)}"
        )
    result.refusal = refusals[0] if refusals else None
    return result


def _cluster_refusal(server: Server, variables: Sequence[str]) -> str:
    """A plain URL that reaches a Cluster node: the broker cannot be one, a store must say so."""
    broker = [v for v in variables if "broker_url" in v.lower()]
    if broker:
        return (
            f"{broker[0]} points at {server.address}, a Redis Cluster node (cluster_enabled:1), "
            "which cannot be a Celery broker (kombu has no Cluster transport, celery#2852); "
            "use a single Redis (or Sentinel) or RabbitMQ as the broker: the limiter and the "
            "ledger may stay on the cluster (redis+cluster://)"
        )
    return (
        f"{variables[0]} points at {server.address}, a Redis Cluster node (cluster_enabled:1), "
        "with a single-server URL; write it redis+cluster://host:port so each key reaches "
        "its slot's node"
    )
