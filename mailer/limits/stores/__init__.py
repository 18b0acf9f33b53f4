"""Limiter stores, one registry: a storage URL's scheme and the policy's shape choose the store.

- ``memory://``: in this process (:mod:`~mailer.limits.stores.memory` for a policy of recipient
  sliding tiers only, :mod:`~mailer.limits.stores.scoped_memory` for any other).
- ``redis://``, ``rediss://``, ``unix://``, ``redis+sentinel://``, ``redis+cluster://``:
  one script call per decision (:mod:`~mailer.limits.stores.redis` runs the single-key
  sliding-log script, :mod:`~mailer.limits.stores.scoped_redis` the scoped one; on a Cluster a
  scoped decision goes scope by scope, :mod:`~mailer.limits.stores.scoped_cluster`).

The single-key stores are an optimisation for the commonest shape, with their own storage
layout (``<namespace>:{<hash>}``, keyed by the policy's name): the same policy always gets the
same store, so every worker and the async limiter share one budget.
"""

from __future__ import annotations

from mailer.clock import Clock
from mailer.errors import mask_url
from mailer.limits.checks import MAX_BOOKINGS
from mailer.limits.policy import Policy
from mailer.limits.scopes import single_key
from mailer.limits.stores.base import Store
from mailer.limits.stores.memory import SlidingMemoryStore
from mailer.limits.stores.redis import SlidingRedisStore
from mailer.limits.stores.scoped_memory import ScopedMemoryStore
from mailer.limits.stores.scoped_redis import ScopedRedisStore
from mailer.storage import is_memory, is_redis

__all__ = ["Store", "open_store"]


def open_store(
    url: str,
    policy: Policy,
    *,
    clock: Clock | None = None,
    namespace: str = "mailguard",
    secret: str | bytes | None = None,
    tz: str = "UTC",
    max_bookings: int = MAX_BOOKINGS,
) -> Store:
    """The store for ``policy`` on the storage ``url`` names (see the module doc).

    ``clock`` (epoch seconds): memory reads it (default: the system clock); Redis reads the
    server's ``TIME`` unless one is given (tests and simulations only). ``tz``: an IANA name
    that aligns ``fixed`` windows; ``max_bookings``: the most entries a shared scope's key
    keeps. Raises ``ValueError`` for another scheme or a bad namespace.
    """
    single = single_key(policy)
    if is_memory(url):
        if single:
            return SlidingMemoryStore(policy, clock=clock, namespace=namespace, secret=secret)
        return ScopedMemoryStore(
            policy,
            clock=clock,
            namespace=namespace,
            secret=secret,
            tz=tz,
            max_bookings=max_bookings,
        )
    if is_redis(url):
        if single:
            return SlidingRedisStore(policy, url, clock=clock, namespace=namespace, secret=secret)
        return ScopedRedisStore(
            policy,
            url,
            clock=clock,
            namespace=namespace,
            secret=secret,
            tz=tz,
            max_bookings=max_bookings,
        )
    raise ValueError(
        f"unsupported limiter URL {mask_url(str(url))!r}: use memory://, redis://, "
        "rediss://, unix://, redis+cluster:// or redis+sentinel://"
    )
