"""A recipient domain's mailbox provider: from a process-local LRU, else the shared store, else
one DNS lookup for the whole fleet (:mod:`mailer.providers`: the story)."""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

from mailer import defaults
from mailer.clock import Clock, system_clock
from mailer.errors import BackendUnavailable
from mailer.limits.keys import KeyHasher
from mailer.providers.resolver import LookupFailed, MxAnswer, Resolver
from mailer.providers.store import ProviderStore, Stored
from mailer.providers.table import normalise, provider_of_hosts

#: How a provider was found: from the table of known MX suffixes, from an unknown MX host's
#: registered domain, from the domain itself having no MX (RFC 5321's implicit MX), or the
#: domain itself standing in while its MX is unknown (a DNS failure, another worker resolving).
KNOWN, MX, IMPLICIT, FALLBACK = "known", "mx", "implicit", "fallback"


@dataclass(frozen=True)
class Provider:
    """A domain's mailbox provider: ``name`` (``google``, ``microsoft``, or a registered domain
    such as ``example.net``) and ``source`` (:data:`KNOWN`, :data:`MX`, :data:`IMPLICIT`,
    :data:`FALLBACK`)."""

    name: str
    source: str


class _Lru:
    """At most ``size`` entries, each until its expiry (epoch seconds); thread-safe."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[str, tuple[Provider, float]] = OrderedDict()

    def get(self, domain: str, now: float) -> Provider | None:
        with self._lock:
            item = self._items.get(domain)
            if item is None:
                return None
            if now >= item[1]:
                del self._items[domain]
                return None
            self._items.move_to_end(domain)
            return item[0]

    def put(self, domain: str, provider: Provider, until: float) -> None:
        with self._lock:
            self._items[domain] = (provider, until)
            self._items.move_to_end(domain)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


class ProviderFinder:
    """``provider_of(domain)``: what the limiter's provider scopes call for each recipient
    domain (:meth:`mailer.Limiter.provider_of`). Thread-safe.

    A cached domain costs one dict lookup (the LRU of ``lru_size`` domains in front of the
    store, each entry expiring with its record). A domain unknown to the LRU is read from the
    ``store`` (memory: this process; Redis: every worker); unknown there too, the caller that
    takes the store's lock (``lock_seconds``, a little over the resolver's bound) asks the
    ``resolver`` once and stores the answer for its DNS TTL clamped to ``[min_ttl, max_ttl]``;
    the others use the domain itself (:data:`FALLBACK`) for ``pending_seconds`` and look again.
    A failed lookup (timeout, SERVFAIL, REFUSED) stores the domain itself for ``negative_ttl``.
    The store down: the lookup is made here and kept in the LRU alone. So no call waits longer
    than the resolver's lifetime, and none raises for DNS or the store.

    Blocking: a lookup waits on DNS up to the resolver's lifetime; from asyncio, call it in a
    thread (``asyncio.to_thread``). Keys: the domain's keyed hash
    (:class:`~mailer.limits.keys.KeyHasher` with ``secret``), ``<namespace>:provider:{<hash>}``.
    Times in seconds on ``clock``.
    """

    def __init__(
        self,
        store: ProviderStore,
        resolver: Resolver,
        clock: Clock | None = None,
        *,
        secret: str | None = None,
        namespace: str = "mailguard",
        min_ttl: float = defaults.PROVIDER_MIN_TTL,
        max_ttl: float = defaults.PROVIDER_MAX_TTL,
        negative_ttl: float = defaults.PROVIDER_NEGATIVE_TTL,
        lock_seconds: float = defaults.PROVIDER_LOCK,
        pending_seconds: float = defaults.PROVIDER_PENDING,
        lru_size: int = defaults.PROVIDER_LRU,
    ) -> None:
        if not 0 < min_ttl <= max_ttl:
            raise ValueError(f"need 0 < min_ttl <= max_ttl, got {min_ttl:g} and {max_ttl:g}")
        self._store = store
        self._resolver = resolver
        self._clock = clock or system_clock
        self._hasher = KeyHasher(secret, f"{namespace}:provider", "provider")
        self._min_ttl, self._max_ttl = min_ttl, max_ttl
        self._negative_ttl = negative_ttl
        self._lock_seconds = lock_seconds
        self._pending_seconds = pending_seconds
        self._lru = _Lru(lru_size)

    def provider_of(self, domain: str) -> Provider:
        """The provider of recipient ``domain`` (any case, a trailing dot allowed).
        ``ValueError`` for an empty or over-long (> 253 characters) domain."""
        name = normalise(domain)
        if not name or len(name) > 253:
            raise ValueError(f"a domain has 1 to 253 characters, got {len(name)}")
        now = self._clock()
        cached = self._lru.get(name, now)
        if cached is not None:
            return cached
        key = self._hasher.storage_key(name)
        try:
            stored = self._store.get(key, now)
            if stored is None:
                if not self._store.claim(key, now, self._lock_seconds):
                    return self._keep(name, Provider(name, FALLBACK), now + self._pending_seconds)
                stored = self._store.get(key, now)  # stored by a worker whose lock just ended
        except BackendUnavailable:
            return self._resolve(name, None, now)
        if stored is not None:
            return self._keep(name, Provider(stored.name, stored.source), stored.until)
        return self._resolve(name, key, now)

    def _resolve(self, name: str, key: str | None, now: float) -> Provider:
        """Resolve ``name`` and keep the answer (in the store at ``key`` unless None)."""
        try:
            answer = self._resolver.mx(name)
        except LookupFailed:
            provider, until = Provider(name, FALLBACK), now + self._negative_ttl
        else:
            provider, until = self._from_answer(answer), now + self._ttl(answer)
        if key is not None:
            # The store down: the answer is still good here; the next process resolves again.
            with contextlib.suppress(BackendUnavailable):
                self._store.put(key, Stored(provider.name, provider.source, until), now)
        return self._keep(name, provider, until)

    @staticmethod
    def _from_answer(answer: MxAnswer) -> Provider:
        name, known = provider_of_hosts(answer.hosts)
        return Provider(name, KNOWN if known else IMPLICIT if answer.implicit else MX)

    def _ttl(self, answer: MxAnswer) -> float:
        ttl = self._min_ttl if answer.ttl is None else answer.ttl
        return min(max(ttl, self._min_ttl), self._max_ttl)

    def _keep(self, name: str, provider: Provider, until: float) -> Provider:
        self._lru.put(name, provider, until)
        return provider
