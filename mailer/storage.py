"""Storage URLs and the Redis client every store shares: the one place that reads a URL's scheme
and the one place that turns "Redis is down" into :class:`mailer.errors.BackendUnavailable`.

Every store (limiter, ledger, schedule, holds, suppressions) is chosen by its URL's scheme:
``memory://`` keeps everything in this process (tests, the demo, threads or solo pools);
``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://``, ``rediss+cluster://`` and
``redis+sentinel://`` reach Redis (see :func:`client_from_url`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import redis
import redis.exceptions

from mailer.errors import BackendUnavailable, mask_url
from mailer.replica_ack import AcknowledgedRedis

T = TypeVar("T")

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


#: The connection settings (redis-py's) that make two URLs reach one server as one user.
_SERVER = ("host", "port", "username", "password", "path", "connection_class")


@functools.lru_cache(maxsize=64)
def database_beside(url: str, other: str) -> str | None:
    """``url`` naming ``other``'s database instead of its own, when both are plain Redis URLs
    (``redis://``, ``rediss://``) to one server as one user in different databases (the
    database in the path); else None. Cached: every ``send_mail.delay`` and receipt asks it."""
    if scheme(url) not in ("redis", "rediss") or scheme(other) != scheme(url):
        return None
    try:
        mine, theirs = (redis.connection.parse_url(u) for u in (url, other))  # type: ignore[no-untyped-call]
    except ValueError:
        return None
    fill = {"port": 6379, "username": None, "password": None}
    if tuple((fill | mine).get(k) for k in _SERVER) != tuple(
        (fill | theirs).get(k) for k in _SERVER
    ):
        return None
    db, own = int(theirs.get("db") or 0), int(mine.get("db") or 0)
    parts = urlsplit(url)
    if db == own or "db=" in parts.query:
        return None
    return parts._replace(path=f"/{db}").geturl()


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


#: A registered Lua script as :meth:`RedisStore.script` hands it out: ``run(keys, args)``.
Script = Callable[[Sequence[Any], Sequence[Any]], Any]


class RedisStore:
    """A redis-py client with the URL and backend name it reports when Redis is down: every
    call made through it raises :class:`~mailer.errors.BackendUnavailable` (``backend``) for
    :data:`REDIS_DOWN`, and lets any other error through (a bug, not an outage).

    A store keeps one and sends every command through :meth:`call` or a :meth:`script`; read
    :attr:`client` directly only to share the connection with another store.
    """

    def __init__(self, client: Any, url: str, backend: str = "ledger") -> None:
        self.client = client
        self.url = url
        self.backend = backend

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``: a client method, a pipeline's ``execute``, a lambda."""
        try:
            return fn(*args, **kwargs)
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self.url, exc, backend=self.backend) from exc

    def script(self, source: str) -> Script:
        """Register a Lua script (its text, e.g. from :func:`lua_source`); the answer runs it
        as ``run(keys, args)`` with ``EVALSHA``, loading it again if the server lost it."""
        registered = self.client.register_script(source)

        def run(keys: Sequence[Any], args: Sequence[Any] = ()) -> Any:
            return self.call(registered, keys=keys, args=args)

        return run

    def unavailable(self) -> AbstractContextManager[None]:
        """A ``with`` block in which :data:`REDIS_DOWN` becomes ``BackendUnavailable`` (for a
        generator that reads as it goes, where one :meth:`call` cannot hold the loop)."""
        return redis_down_as_unavailable(self.url, self.backend)


def run_script(
    client: Any, script: tuple[str, str], keys: Sequence[Any], args: Sequence[Any], url: str
) -> Any:
    """``EVALSHA`` of ``script`` (its ``(source, sha1)``) on ``client``, loading it again when
    the server lost it (restart, ``SCRIPT FLUSH``); :data:`REDIS_DOWN` becomes
    :class:`~mailer.errors.BackendUnavailable` for the limiter at ``url``."""
    source, sha = script
    try:
        try:
            return client.evalsha(sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:  # the command did not run: load, run again
            client.script_load(source)
            return client.evalsha(sha, len(keys), *keys, *args)
    except REDIS_DOWN as exc:
        raise BackendUnavailable(url, exc) from exc


def lua_source(package: str, name: str) -> str:
    """The text of the Lua script ``lua/<name>.lua`` shipped in ``package`` (package data)."""
    return resources.files(package).joinpath(f"lua/{name}.lua").read_text()


def client_from_url(url: str, **options: Any) -> Any:
    """Build a redis-py client from a URL.

    - ``redis://[:password@]host:port/db``, ``rediss://`` (TLS), ``unix:///path?db=0``
    - ``redis+cluster://host:port`` (``rediss+cluster://`` with TLS): Redis Cluster, any node
      as the entry point; every key of one subject shares a hash tag, so one slot.
    - ``redis+sentinel://[:password@]host:port[,host:port...]/service[/db]``: the current
      master of ``service`` as told by the sentinels, followed across failovers; its scripts
      (bookings, claims) return once a replica holds their writes (:mod:`mailer.replica_ack`).

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


@dataclass(frozen=True)
class SentinelURL:
    """A ``redis+sentinel://`` URL's parts: the sentinels' ``(host, port)``, the service (the
    master's name in the sentinels' configuration), the database and the password, if any (the
    master's; the sentinels are asked without one)."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    password: str | None = None


def is_sentinel(url: object) -> bool:
    """Whether ``url`` names a Redis behind Sentinel (``redis+sentinel://``)."""
    return scheme(url) == "redis+sentinel"


def parse_sentinel_url(url: str) -> SentinelURL:
    """The parts of ``redis+sentinel://[:password@]host:port[,host:port...]/service[/db]``;
    ``ValueError`` (one line, the password masked) for a bad address, no service or a bad db."""
    parts = urlsplit(url)
    userinfo, _, hosts_part = parts.netloc.rpartition("@")
    password = unquote(userinfo.split(":", 1)[-1]) if userinfo else None
    sentinels = []
    for host_port in hosts_part.split(","):
        host, _, port = host_port.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bad sentinel address {host_port!r} in {mask_url(url)}")
        sentinels.append((host.strip("[]"), int(port)))
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ValueError(f"sentinel URL {mask_url(url)} names no service: .../<service>[/db]")
    if len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ValueError(f"sentinel URL {mask_url(url)}: the path is /<service>[/<db number>]")
    db = int(path[1]) if len(path) > 1 else 0
    return SentinelURL(tuple(sentinels), path[0], db, password or None)


def _sentinel_master(url: str, **options: Any) -> Any:
    from redis.sentinel import Sentinel  # noqa: PLC0415 - only for sentinel URLs

    parsed = parse_sentinel_url(url)
    sentinel = Sentinel(  # type: ignore[no-untyped-call,unused-ignore]
        list(parsed.sentinels),
        socket_timeout=options["socket_timeout"],
        socket_connect_timeout=options["socket_connect_timeout"],
    )
    master = sentinel.master_for  # redis-py leaves these two untyped
    return master(  # type: ignore[no-untyped-call,unused-ignore]
        parsed.service,
        redis_class=AcknowledgedRedis,  # its scripts wait for a replica (mailer.replica_ack)
        db=parsed.db,
        password=parsed.password,
        **options,
    )
