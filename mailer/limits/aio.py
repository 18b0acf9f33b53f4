"""The limiter for asyncio apps: :class:`AsyncLimiter`, :class:`mailer.Limiter`'s decisions with
``async`` methods, on redis-py's asyncio client.

The same compiled script, the same hashed keys and the same secret as the workers' limiter, so
an async web app and the workers share one budget per recipient::

    limiter = AsyncLimiter.from_url(settings.limiter_url, settings.policy, secret=settings.secret)
    decision = await limiter.peek("ada@example.com")

``redis://``, ``rediss://`` and ``unix://`` storage, and ``memory://`` (the in-process backend,
whose calls never wait on I/O). Redis Cluster and Sentinel URLs are refused with one line: use
the blocking :class:`mailer.Limiter` there (in a thread: ``asyncio.to_thread``). Do not share
one ``AsyncLimiter`` between event loops.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from mailer.clock import Clock, to_us
from mailer.errors import BackendUnavailable, mask_url
from mailer.limits.decision import Decision
from mailer.limits.keys import KeyHasher, check_key, mail_tag
from mailer.limits.limiter import MAX_WAIT
from mailer.limits.policy import Policy
from mailer.limits.sliding_log import RawDecision, TierSpec
from mailer.limits.stores.memory import MemoryBackend
from mailer.limits.stores.redis import compile_script
from mailer.limits.stores.redis_errors import REDIS_DOWN

_ASYNC_SCHEMES = ("redis", "rediss", "unix")


class AsyncRedisBackend:
    """The Redis backend's script calls, awaited (``redis.asyncio``); one round trip each."""

    def __init__(self, spec: TierSpec, url: str, *, clock: Clock | None = None) -> None:
        import redis.asyncio  # noqa: PLC0415 - only for Redis URLs

        self.url = url
        self._client: Any = redis.asyncio.Redis.from_url(
            url, socket_connect_timeout=2.0, socket_timeout=2.0
        )
        self._clock = clock
        self.script, self.script_sha = compile_script(spec)

    async def call(self, key: str, mode: str, tag: int, max_wait_ms: int) -> RawDecision:
        """``mode``: ``a`` acquire, ``p`` peek, ``r`` release (the script's own modes)."""
        import redis.exceptions  # noqa: PLC0415

        now = "" if self._clock is None else to_us(self._clock())
        args = (mode, now, tag, max_wait_ms)
        try:
            try:
                reply = await self._client.evalsha(self.script_sha, 1, key, *args)
            except redis.exceptions.NoScriptError:  # not run: load the script, run again
                await self._client.script_load(self.script)
                reply = await self._client.evalsha(self.script_sha, 1, key, *args)
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self.url, exc) from exc
        return tuple(reply) if isinstance(reply, list) else (int(reply),)

    async def reset(self, key: str) -> None:
        try:
            await self._client.delete(key)
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self.url, exc) from exc

    async def close(self) -> None:
        await self._client.aclose()


class _AsyncMemory:
    """The in-process backend behind the same awaitable calls (it never waits on I/O)."""

    def __init__(self, backend: MemoryBackend) -> None:
        self.backend = backend

    async def call(self, key: bytes, mode: str, tag: int, max_wait_ms: int) -> RawDecision:
        if mode == "a":
            return self.backend.acquire(key, tag, max_wait_ms)
        if mode == "p":
            return self.backend.peek(key)
        return (int(self.backend.release(key, tag)),)

    async def reset(self, key: bytes) -> None:
        self.backend.reset(key)

    async def close(self) -> None:
        self.backend.close()


class AsyncLimiter:
    """:class:`mailer.Limiter` for asyncio: ``acquire``, ``peek``, ``release``, ``reset``,
    ``close`` are coroutines with the same arguments and answers. Build with :meth:`from_url`.
    """

    def __init__(
        self,
        policy: Policy,
        backend: AsyncRedisBackend | MemoryBackend,
        *,
        namespace: str = "mailguard",
        secret: str | bytes | None = None,
    ) -> None:
        self.policy = policy
        self._hasher = KeyHasher(secret, namespace, policy.name)
        self._memory = _AsyncMemory(backend) if isinstance(backend, MemoryBackend) else None
        self._redis = backend if isinstance(backend, AsyncRedisBackend) else None

    @classmethod
    def from_url(
        cls,
        url: str,
        policy: Policy,
        *,
        clock: Clock | None = None,
        namespace: str = "mailguard",
        secret: str | bytes | None = None,
    ) -> AsyncLimiter:
        """As :meth:`mailer.Limiter.from_url`, for ``memory://``, ``redis://``, ``rediss://``
        and ``unix://`` (``ValueError`` for any other URL)."""
        spec = TierSpec([(t.limit, t.window_ms) for t in policy.tiers])
        scheme = urlsplit(url).scheme if isinstance(url, str) else ""
        backend: AsyncRedisBackend | MemoryBackend
        if scheme == "memory":
            backend = MemoryBackend(spec, clock)
        elif scheme in _ASYNC_SCHEMES:
            backend = AsyncRedisBackend(spec, url, clock=clock)
        else:
            raise ValueError(
                f"AsyncLimiter cannot use {mask_url(str(url))!r}: use memory://, redis://, "
                "rediss:// or unix:// (for Cluster or Sentinel, the blocking mailer.Limiter)"
            )
        return cls(policy, backend, namespace=namespace, secret=secret)

    async def acquire(
        self, key: str, *, mail_id: str | None = None, max_wait: float = 0.0
    ) -> Decision:
        """See :meth:`mailer.Limiter.acquire`."""
        tag = 0 if mail_id is None else mail_tag(mail_id)
        if not 0 <= max_wait <= MAX_WAIT:  # also refuses NaN
            raise ValueError(f"max_wait must be between 0 and {MAX_WAIT:.0f} s, got {max_wait}")
        return self._decision(await self._call(key, "a", tag, int(max_wait * 1000)))

    async def peek(self, key: str) -> Decision:
        """See :meth:`mailer.Limiter.peek`: consumes nothing."""
        return self._decision(await self._call(key, "p", 0, 0))

    async def release(self, key: str, mail_id: str) -> bool:
        """See :meth:`mailer.Limiter.release`."""
        return bool((await self._call(key, "r", mail_tag(mail_id), 0))[0])

    async def reset(self, key: str) -> None:
        """Forget every admission and booking of ``key``."""
        check_key(key)
        if self._memory is not None:
            await self._memory.reset(self._hasher.digest(key))
        elif self._redis is not None:
            await self._redis.reset(self._hasher.storage_key(key))

    async def close(self) -> None:
        """Release the backend's connections (memory: forget everything)."""
        if self._memory is not None:
            await self._memory.close()
        elif self._redis is not None:
            await self._redis.close()

    async def _call(self, key: str, mode: str, tag: int, max_wait_ms: int) -> RawDecision:
        check_key(key)
        if self._memory is not None:
            return await self._memory.call(self._hasher.digest(key), mode, tag, max_wait_ms)
        assert self._redis is not None
        return await self._redis.call(self._hasher.storage_key(key), mode, tag, max_wait_ms)

    def _decision(self, raw: RawDecision) -> Decision:
        tier_index = raw[4]
        tier = self.policy.tiers[tier_index - 1] if tier_index else None
        return Decision(raw[0] == 1, raw[1] == 1, raw[2], raw[3], tier, tuple(raw[5:]))
