"""Redis limiter storage: one ``EVALSHA`` of ``lua/sliding_log.lua`` per decision.

For many worker processes and hosts. The script reads the server's ``TIME`` (one clock for every
worker) unless the limiter was given a clock (tests, simulations). Every key has a TTL that ends
when its newest entry leaves the longest window. Keys carry a ``{hash tag}``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
import redis.exceptions

from mailer.clock import Clock, to_us
from mailer.errors import BackendUnavailable, mask_url
from mailer.limits.sliding_log import RawDecision, TierSpec
from mailer.limits.stores.redis_errors import REDIS_DOWN

#: The script's text with the policy markers in place; :func:`compile_script` fills them.
SCRIPT_TEMPLATE = (
    resources.files("mailer.limits.stores").joinpath("lua/sliding_log.lua").read_text()
)


def compile_script(spec: TierSpec) -> tuple[str, str]:
    """Return ``(source, sha1)`` of the script with ``spec``'s tiers compiled in.

    Baking the policy into the script saves sending and parsing it on every call.
    """
    source = SCRIPT_TEMPLATE.replace("--[[LIMITS]]", ", ".join(map(str, spec.limits))).replace(
        "--[[WINDOWS]]", ", ".join(map(str, spec.windows))
    )
    return source, hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis's script name


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
    scheme = urlsplit(url).scheme
    if scheme.endswith("+cluster"):
        from redis.cluster import RedisCluster  # noqa: PLC0415 - only for cluster URLs

        return RedisCluster.from_url(url.replace("+cluster", "", 1), **options)
    if scheme == "redis+sentinel":
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


class RedisBackend:
    """Sliding logs in Redis strings, one atomic script call per decision.

    Raises :class:`mailer.errors.BackendUnavailable` when the server cannot be reached.
    A script missing from the server's cache (restart, ``SCRIPT FLUSH``) is loaded again.
    """

    keys_as_digest = False

    def __init__(
        self,
        spec: TierSpec,
        url: str,
        *,
        clock: Clock | None = None,
        client: Any = None,
    ) -> None:
        self.url = url
        self._client = client if client is not None else client_from_url(url)
        # Keys of different subjects may live in different Cluster slots: acquire_many then
        # goes key by key there, and in one multi-key script call elsewhere.
        self._pipelined = not type(self._client).__name__.endswith("Cluster")
        self._clock = clock
        self.script, self.script_sha = compile_script(spec)

    @property
    def client(self) -> Any:
        """The redis-py client (shared connection pool)."""
        return self._client

    def acquire(self, key: str, tag: int, max_wait_ms: int, not_before_ms: int = 0) -> RawDecision:
        if not_before_ms:
            now = "" if self._clock is None else to_us(self._clock())
            return tuple(self._evalsha([key], ["a", now, tag, max_wait_ms, not_before_ms]))
        return tuple(self._call(key, "a", tag, max_wait_ms))

    def acquire_many(self, items: Sequence[tuple[str, int]], max_wait_ms: int) -> list[RawDecision]:
        """All keys in one script call (one round trip); key by key on Redis Cluster."""
        if not items:
            return []
        if not self._pipelined:
            return [self.acquire(key, tag, max_wait_ms) for key, tag in items]
        keys = [key for key, _ in items]
        args = ["m", "" if self._clock is None else to_us(self._clock()), max_wait_ms]
        args += [tag for _, tag in items]
        return [tuple(answer) for answer in self._evalsha(keys, args)]

    def peek(self, key: str) -> RawDecision:
        return tuple(self._call(key, "p", 0, 0))

    def release(self, key: str, tag: int) -> bool:
        return bool(self._call(key, "r", tag, 0))

    def reset(self, key: str) -> None:
        with self._translate():
            self._client.delete(key)

    def close(self) -> None:
        self._client.close()
        # A sentinel-managed client also holds connections to the sentinels.
        manager = getattr(getattr(self._client, "connection_pool", None), "sentinel_manager", None)
        for sentinel in getattr(manager, "sentinels", ()):
            sentinel.close()

    def _call(self, key: str, mode: str, tag: int, max_wait_ms: int) -> Any:
        now = "" if self._clock is None else to_us(self._clock())
        return self._evalsha([key], [mode, now, tag, max_wait_ms])

    def _evalsha(self, keys: list[str], args: list[Any]) -> Any:
        # try/except inline rather than _translate(): this is the hot path.
        try:
            try:
                return self._client.evalsha(self.script_sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:  # the command did not run: load, run again
                self._client.script_load(self.script)
                return self._client.evalsha(self.script_sha, len(keys), *keys, *args)
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self.url, exc) from exc

    @contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self.url, exc) from exc
