"""The limiter for asyncio apps: :class:`AsyncLimiter`, :class:`mailer.Limiter`'s decisions with
``async`` methods, on redis-py's asyncio client.

The same compiled scripts, the same hashed keys and the same secret as the workers' limiter, so
an async web app and the workers share one budget per recipient, for every policy (scoped ones
included)::

    limiter = AsyncLimiter.from_url(settings.limiter_url, settings.policy, secret=settings.secret)
    decision = await limiter.peek("ada@example.com")

``redis://``, ``rediss://`` and ``unix://`` storage, and ``memory://`` (the in-process stores,
whose calls never wait on I/O). Redis Cluster and Sentinel URLs are refused with one line: use
the blocking :class:`mailer.Limiter` there (in a thread: ``asyncio.to_thread``). Do not share
one ``AsyncLimiter`` between event loops.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio
import redis.exceptions

from mailer.clock import Clock, to_us
from mailer.errors import BackendUnavailable, mask_url
from mailer.limits.checks import check_max_wait, check_share, check_tenant, not_before_ms
from mailer.limits.decision import Decision
from mailer.limits.keys import KeyHasher, check_key, mail_tag
from mailer.limits.limiter import Limiter, require_secret
from mailer.limits.policy import Policy
from mailer.limits.scopes import single_key
from mailer.limits.stores.redis import compile_script, sliding_decision
from mailer.limits.stores.scoped_script import ScopedScript, refused_data
from mailer.storage import REDIS_DOWN, is_memory, redis_down_as_unavailable, scheme

_ASYNC_SCHEMES = ("redis", "rediss", "unix")


class AsyncRedisBackend:
    """One compiled script on ``redis.asyncio``: each call one awaited ``EVALSHA``."""

    def __init__(self, url: str, script: str, sha: str) -> None:
        self.url = url
        self.client: Any = redis.asyncio.Redis.from_url(
            url, socket_connect_timeout=2.0, socket_timeout=2.0
        )
        self.script, self.script_sha = script, sha

    async def call(self, keys: list[str], args: list[Any]) -> Any:
        """Run the script (loading it again if the server lost it)."""
        try:
            try:
                return await self.client.evalsha(self.script_sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:  # not run: load the script, run again
                await self.client.script_load(self.script)
                return await self.client.evalsha(self.script_sha, len(keys), *keys, *args)
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self.url, exc) from exc
        except redis.exceptions.ResponseError as exc:
            raise refused_data(exc) from None

    async def delete_matching(self, key: str, pattern: str | None) -> None:
        """Delete ``key``, and with ``pattern`` every key matching it."""
        with redis_down_as_unavailable(self.url):
            keys = [key]
            if pattern is not None:
                keys += [k async for k in self.client.scan_iter(match=pattern, count=1000)]
            await self.client.delete(*keys)

    async def close(self) -> None:
        """Release the connections."""
        await self.client.aclose()


class AsyncLimiter:
    """:class:`mailer.Limiter` for asyncio: ``acquire``, ``peek``, ``release``, ``reset``,
    ``close`` are coroutines with the same arguments and answers. Build with :meth:`from_url`,
    or :meth:`sharing` a blocking in-process limiter.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        backend: AsyncRedisBackend | None = None,
        blocking: Limiter | None = None,
        namespace: str = "mailguard",
        secret: str | bytes | None = None,
        clock: Clock | None = None,
        tz: str = "UTC",
    ) -> None:
        self.policy = policy
        self._backend = backend
        self._blocking = blocking
        self._clock = clock
        self._single = single_key(policy)
        self._hasher = KeyHasher(secret, namespace, policy.name)
        self._scoped = ScopedScript(policy, clock=clock, namespace=namespace, secret=secret, tz=tz)

    @classmethod
    def from_url(
        cls,
        url: str,
        policy: Policy,
        *,
        secret: str | bytes | None = None,
        clock: Clock | None = None,
        namespace: str = "mailguard",
        tz: str = "UTC",
    ) -> AsyncLimiter:
        """As :meth:`mailer.Limiter.from_url`, for ``memory://``, ``redis://``, ``rediss://``
        and ``unix://`` (``ValueError`` for any other URL, or for Redis without ``secret``)."""
        if is_memory(url):
            blocking = Limiter.from_url(
                url, policy, secret=secret, clock=clock, namespace=namespace, tz=tz
            )
            return cls.sharing(blocking)
        if scheme(url) not in _ASYNC_SCHEMES:
            raise ValueError(
                f"AsyncLimiter cannot use {mask_url(str(url))!r}: use memory://, redis://, "
                "rediss:// or unix:// (for Cluster or Sentinel, the blocking mailer.Limiter)"
            )
        require_secret(url, secret, "AsyncLimiter.from_url")
        made = cls(policy, namespace=namespace, secret=secret, clock=clock, tz=tz)
        if made._single:
            source, sha = compile_script(policy)
        else:
            source, sha = made._scoped.source, made._scoped.sha
        made._backend = AsyncRedisBackend(url, source, sha)
        return made

    @classmethod
    def sharing(cls, limiter: Limiter) -> AsyncLimiter:
        """``limiter``'s calls, awaited: for an in-process limiter (its calls never wait on I/O),
        so that an async app and blocking code in one process share its budget."""
        return cls(limiter.policy, blocking=limiter)

    async def acquire(
        self,
        recipient: str,
        *,
        tenant: str | None = None,
        mail_id: str | None = None,
        max_wait: float = 0.0,
        share: float = 1.0,
        not_before: float | None = None,
        provider: str | None = None,
    ) -> Decision:
        """See :meth:`mailer.Limiter.acquire`. ``provider``: the mail's provider for the
        provider scopes (None: a shared blocking limiter's finder, else the domain: no DNS is
        asked from the event loop; find it with ``asyncio.to_thread(finder.provider_of, d)``)."""
        if self._blocking is not None:
            return self._blocking.acquire(
                recipient,
                tenant=tenant,
                mail_id=mail_id,
                max_wait=max_wait,
                share=share,
                not_before=not_before,
                provider=provider,
            )
        check_key(recipient)
        check_tenant(tenant)
        tag, max_wait_ms, share = mail_tag(mail_id), check_max_wait(max_wait), check_share(share)
        nb = 0 if not_before is None else not_before_ms(not_before)
        if self._single:
            return await self._sliding(recipient, "a", tag, max_wait_ms, nb)
        planned = self._scoped.plan(
            "a",
            recipient,
            tenant=tenant,
            tag=tag,
            max_wait_ms=max_wait_ms,
            share=share,
            not_before=nb,
            provider=provider,
        )
        return self._scoped.decision(
            await self._redis.call(planned.keys, planned.argv()), planned.present
        )

    async def peek(
        self,
        recipient: str,
        *,
        tenant: str | None = None,
        share: float = 1.0,
        provider: str | None = None,
    ) -> Decision:
        """See :meth:`mailer.Limiter.peek`: consumes nothing."""
        if self._blocking is not None:
            return self._blocking.peek(recipient, tenant=tenant, share=share, provider=provider)
        check_key(recipient)
        check_tenant(tenant)
        share = check_share(share)
        if self._single:
            return await self._sliding(recipient, "p", 0, 0)
        planned = self._scoped.plan("p", recipient, tenant=tenant, share=share, provider=provider)
        return self._scoped.decision(
            await self._redis.call(planned.keys, planned.argv()), planned.present
        )

    async def release(
        self,
        recipient: str,
        mail_id: str,
        *,
        tenant: str | None = None,
        provider: str | None = None,
    ) -> bool:
        """See :meth:`mailer.Limiter.release`."""
        if self._blocking is not None:
            return self._blocking.release(recipient, mail_id, tenant=tenant, provider=provider)
        check_key(recipient)
        tag = mail_tag(mail_id)
        if self._single:
            key = self._hasher.storage_key(recipient)
            return bool(await self._redis.call([key], ["r", self._now(), tag, 0]))
        planned = self._scoped.plan("r", recipient, tenant=tenant, tag=tag, provider=provider)
        return bool(await self._redis.call(planned.keys, planned.argv()))

    async def reset(self, recipient: str) -> None:
        """Forget every admission and booking of ``recipient`` (its own keys)."""
        if self._blocking is not None:
            self._blocking.reset(recipient)
            return
        check_key(recipient)
        if self._single:
            await self._redis.delete_matching(self._hasher.storage_key(recipient), None)
        else:
            base = self._scoped.scopes[0].hasher.storage_key(recipient)
            await self._redis.delete_matching(base, base + ":*")

    async def close(self) -> None:
        """Release the connections (memory: forget everything)."""
        if self._blocking is not None:
            self._blocking.close()
        else:
            await self._redis.close()

    @property
    def _redis(self) -> AsyncRedisBackend:
        assert self._backend is not None
        return self._backend

    def _now(self) -> int | str:
        return "" if self._clock is None else to_us(self._clock())

    async def _sliding(
        self, recipient: str, mode: str, tag: int, max_wait_ms: int, nb: int = 0
    ) -> Decision:
        args = [mode, self._now(), tag, max_wait_ms, *([nb] if nb else [])]
        raw = await self._redis.call([self._hasher.storage_key(recipient)], args)
        return sliding_decision(raw, self.policy.tiers)
