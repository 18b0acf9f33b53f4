"""Mailbox providers from MX: which provider (Google, Microsoft, Yahoo...) receives a
recipient domain's mail, so that limits and reactions can follow the provider, not the domain
(every Google Workspace domain is Google, whatever its name).

A domain's provider is found from its MX hosts, most preferred first
(:mod:`mailer.providers.table`): the first host under a known provider's MX suffix names the
provider (``aspmx.l.google.com``: ``google``); with none known, the most preferred host's
registered domain is the provider (``mx1.mailhost.example.net``: ``example.net``). A domain
without MX is its own mail host (RFC 5321 implicit MX) and so its own provider, named the same
way.

:class:`ProviderFinder` caches: a process-local LRU in front of a store shared by every worker
(memory: one process; the limiter's Redis: every worker), each answer kept for its DNS TTL
clamped to 5 min-1 day; a new domain is looked up by one worker of the fleet (a short lock),
the others using the domain itself until it is known. A DNS failure is bounded by the
resolver's lifetime (``MAILGUARD_DNS_TIMEOUT``, 2 s) and makes the domain its own provider for
a minute; no failure raises or drops mail.

What the limiter's provider scopes call (:class:`mailer.Limiter`'s ``providers``; the workers
build it with :func:`mailer.factory.build_providers` for a policy with provider tiers)::

    finder = provider_finder("redis://...", servers=settings.dns_servers)
    finder.provider_of("shop.example")  # Provider(name="google", source="known")

- :mod:`mailer.providers.table`: known MX suffixes with their sources, registered domains
- :mod:`mailer.providers.resolver`: :class:`MxResolver` (dnspython, bounded), :class:`MxAnswer`
- :mod:`mailer.providers.store`: :class:`Stored`, the :class:`ProviderStore` protocol,
  :class:`MemoryProviderStore`
- :mod:`mailer.providers.redis_store`: :class:`RedisProviderStore` (keys hashed)
- :mod:`mailer.providers.finder`: :class:`ProviderFinder`, :class:`Provider`
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mailer import defaults
from mailer.clock import Clock
from mailer.providers.finder import FALLBACK, IMPLICIT, KNOWN, MX, Provider, ProviderFinder
from mailer.providers.redis_store import RedisProviderStore
from mailer.providers.resolver import LookupFailed, MxAnswer, MxResolver, Resolver
from mailer.providers.store import MemoryProviderStore, ProviderStore, Stored
from mailer.storage import client_from_url, is_memory

__all__ = [
    "FALLBACK",
    "IMPLICIT",
    "KNOWN",
    "MX",
    "LookupFailed",
    "MemoryProviderStore",
    "MxAnswer",
    "MxResolver",
    "Provider",
    "ProviderFinder",
    "ProviderStore",
    "RedisProviderStore",
    "Resolver",
    "Stored",
    "provider_finder",
]


def provider_finder(
    url: str,
    *,
    servers: Sequence[tuple[str, int]] = (),
    timeout: float = defaults.DNS_TIMEOUT,
    secret: str | None = None,
    namespace: str = "mailguard",
    clock: Clock | None = None,
    client: Any = None,
) -> ProviderFinder:
    """A :class:`ProviderFinder` on ``memory://`` or the limiter's Redis URL (``client`` reuses
    a redis-py client), resolving with ``servers`` (``MAILGUARD_DNS_SERVERS``; empty: the
    system's) within ``timeout`` seconds (``MAILGUARD_DNS_TIMEOUT``)."""
    store: ProviderStore
    if is_memory(url):
        store = MemoryProviderStore(clock)
    else:
        store = RedisProviderStore(client if client is not None else client_from_url(url), url)
    resolver = MxResolver(servers, lifetime=timeout)
    return ProviderFinder(store, resolver, clock, secret=secret, namespace=namespace)
