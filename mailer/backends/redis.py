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

from mailer.clock import Clock, to_ms
from mailer.errors import BackendUnavailable
from mailer.sliding_log import RawDecision, TierSpec

#: The script's text with the policy markers in place; :func:`compile_script` fills them.
SCRIPT_TEMPLATE = resources.files("mailer.backends").joinpath("lua/sliding_log.lua").read_text()

_UNAVAILABLE = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,
)


def compile_script(spec: TierSpec) -> tuple[str, str]:
    """Return ``(source, sha1)`` of the script with ``spec``'s tiers compiled in.

    Baking the policy into the script saves sending and parsing it on every call.
    """
    source = SCRIPT_TEMPLATE.replace("--[[LIMITS]]", ", ".join(map(str, spec.limits))).replace(
        "--[[WINDOWS]]", ", ".join(map(str, spec.windows))
    )
    return source, hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis's script name


def client_from_url(url: str, **options: Any) -> redis.Redis:
    """Build a redis-py client for ``redis://``, ``rediss://`` or ``unix://`` URLs.

    Timeouts default to 2 s (connect and reply), so an outage is reported quickly.
    """
    options.setdefault("socket_connect_timeout", 2.0)
    options.setdefault("socket_timeout", 2.0)
    return redis.Redis.from_url(url, **options)


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
        client: redis.Redis | None = None,
    ) -> None:
        self.url = url
        self._client = client if client is not None else client_from_url(url)
        self._clock = clock
        self.script, self.script_sha = compile_script(spec)

    @property
    def client(self) -> redis.Redis:
        """The redis-py client (shared connection pool)."""
        return self._client

    def _now(self) -> int | str:
        return "" if self._clock is None else to_ms(self._clock())

    def acquire(self, key: str, tag: int, max_wait_ms: int) -> RawDecision:
        return tuple(self._call(key, "a", tag, max_wait_ms))

    def acquire_many(self, items: Sequence[tuple[str, int]], max_wait_ms: int) -> list[RawDecision]:
        if not items:
            return []
        with self._translate():
            now = self._now()
            pipe = self._client.pipeline(transaction=False)
            for key, tag in items:
                pipe.evalsha(self.script_sha, 1, key, "a", now, tag, max_wait_ms)
            answers = pipe.execute(raise_on_error=False)
            missing = [
                i for i, a in enumerate(answers) if isinstance(a, redis.exceptions.NoScriptError)
            ]
            if missing:
                # A NOSCRIPT reply means that command did not run: run just those again.
                self._client.script_load(self.script)
                pipe = self._client.pipeline(transaction=False)
                for i in missing:
                    key, tag = items[i]
                    pipe.evalsha(self.script_sha, 1, key, "a", now, tag, max_wait_ms)
                for i, answer in zip(missing, pipe.execute(raise_on_error=False), strict=True):
                    answers[i] = answer
            for answer in answers:
                if isinstance(answer, Exception):
                    raise answer
            return [tuple(answer) for answer in answers]

    def peek(self, key: str) -> RawDecision:
        return tuple(self._call(key, "p", 0, 0))

    def release(self, key: str, tag: int) -> bool:
        return bool(self._call(key, "r", tag, 0))

    def reset(self, key: str) -> None:
        with self._translate():
            self._client.delete(key)

    def close(self) -> None:
        self._client.close()

    def _call(self, key: str, mode: str, tag: int, max_wait_ms: int) -> Any:
        # try/except inline rather than _translate(): this is the hot path.
        now = "" if self._clock is None else to_ms(self._clock())
        try:
            try:
                return self._client.evalsha(self.script_sha, 1, key, mode, now, tag, max_wait_ms)
            except redis.exceptions.NoScriptError:
                self._client.script_load(self.script)
                return self._client.evalsha(self.script_sha, 1, key, mode, now, tag, max_wait_ms)
        except _UNAVAILABLE as exc:
            raise BackendUnavailable(self.url, exc) from exc

    @contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except _UNAVAILABLE as exc:
            raise BackendUnavailable(self.url, exc) from exc
