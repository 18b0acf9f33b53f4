"""Storage URLs and the Redis client every store shares: the one place that reads a URL's scheme
and the one place that turns "Redis is down" into :class:`mailer.errors.BackendUnavailable`.

Every store (limiter, ledger, schedule, holds, suppressions) is chosen by its URL's scheme:
``memory://`` keeps everything in this process (tests, the demo, threads or solo pools);
``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://``, ``rediss+cluster://`` and
``redis+sentinel://`` reach Redis (see :func:`client_from_url`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
import redis.exceptions

from mailer.errors import BackendUnavailable, mask_url

#: The schemes that name a Redis server (plain, TLS, socket, Cluster, Sentinel).
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel")

#: The scheme of the in-process stores.
MEMORY = "memory"

#: The redis-py exceptions that mean "the backend is down" (connection refused or lost, timeout,
#: a read-only replica after a failover, a Cluster without a quorum), not "the command was
#: wrong": any other Redis error is a bug and propagates.
REDIS_DOWN: tuple[type[redis.exceptions.RedisError], ...] = (
    redis.exceptions.ConnectionError,  # includes sentinel's MasterNotFoundError
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.ClusterError,
)


def scheme(url: object) -> str:
    """The scheme of a storage URL (``"redis"``, ``"memory"``...); ``""`` for a non-string."""
    return urlsplit(url).scheme if isinstance(url, str) else ""


def is_memory(url: object) -> bool:
    """Whether ``url`` names the in-process stores (``memory://``)."""
    return scheme(url) == MEMORY


def is_redis(url: object) -> bool:
    """Whether ``url`` names a Redis server in one of :data:`REDIS_SCHEMES`."""
    return scheme(url) in REDIS_SCHEMES


def is_cluster(url: object) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://``, ``rediss+cluster://``)."""
    return scheme(url).endswith("+cluster")


@contextmanager
def redis_down_as_unavailable(url: str, backend: str = "limiter") -> Iterator[None]:
    """Turn :data:`REDIS_DOWN` raised inside into :class:`BackendUnavailable` for ``backend``."""
    try:
        yield
    except REDIS_DOWN as exc:
        raise BackendUnavailable(url, exc, backend=backend) from exc


def client_from_url(url: str, **options: Any) -> Any:
    """Build a redis-py client from a URL.

    - ``redis://[:password@]host:port/db``, ``rediss://`` (TLS), ``unix:///path?db=0``
    - ``redis+cluster://host:port`` (``rediss+cluster://`` with TLS): Redis Cluster, any node
      as the entry point; every key of one subject shares a hash tag, so one slot.
    - ``redis+sentinel://[:password@]host:port[,host:port...]/service[/db]``: the current
      master of ``service`` as told by the sentinels, followed across failovers.

    Timeouts default to 2 s (connect and reply), so an outage is reported quickly.
    """
    options.setdefault("socket_connect_timeout", 2.0)
    options.setdefault("socket_timeout", 2.0)
    if is_cluster(url):
        from redis.cluster import RedisCluster  # noqa: PLC0415 - only for cluster URLs

        return RedisCluster.from_url(url.replace("+cluster", "", 1), **options)
    if scheme(url) == "redis+sentinel":
        return _sentinel_master(url, **options)
    return redis.Redis.from_url(url, **options)


def _sentinel_master(url: str, **options: Any) -> Any:
    from redis.sentinel import Sentinel  # noqa: PLC0415 - only for sentinel URLs

    parts = urlsplit(url)
    hosts_part = parts.netloc.rsplit("@", 1)[-1]
    password = (
        unquote(parts.netloc.rsplit("@", 1)[0].split(":", 1)[-1]) if "@" in parts.netloc else None
    )
    sentinels = []
    for host_port in hosts_part.split(","):
        host, _, port = host_port.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bad sentinel address {host_port!r} in {mask_url(url)}")
        sentinels.append((host.strip("[]"), int(port)))
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ValueError(f"sentinel URL {mask_url(url)} names no service: .../<service>[/db]")
    db = int(path[1]) if len(path) > 1 else 0
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        sentinels,
        socket_timeout=options["socket_timeout"],
        socket_connect_timeout=options["socket_connect_timeout"],
    )
    master = sentinel.master_for  # redis-py leaves these two untyped
    return master(path[0], db=db, password=password, **options)  # type: ignore[no-untyped-call]
