"""Public path of :mod:`mailer.limits.aio` (the asyncio limiter for web apps)."""

from mailer.limits.aio import AsyncLimiter, AsyncRedisBackend

__all__ = ["AsyncLimiter", "AsyncRedisBackend"]
