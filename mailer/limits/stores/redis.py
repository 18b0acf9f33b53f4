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

import redis
import redis.exceptions

from mailer.clock import Clock, to_us
from mailer.errors import BackendUnavailable
from mailer.limits.sliding_log import RawDecision, TierSpec
from mailer.storage import REDIS_DOWN, client_from_url

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
