"""The suppression list: addresses whose mailbox is gone, not contacted again for a while.

A hard bounce (``550 5.1.1 user unknown``, see :mod:`mailer.mail.replies`) suppresses the recipient
for ``MAILGUARD_SUPPRESS_FOR`` (30 days by default): a later mail to it ends ``dropped`` /
``suppressed`` without contacting the server, since every bounce repeated hurts the sender's
reputation. Operators add addresses by hand (a complaint, an ESP's bounce webhook) and lift
them (``mailguard suppress / unsuppress / suppressed``).

Entries are keyed by a keyed hash of the normalised address (``MAILGUARD_SECRET``), never the
address: ``<namespace>:suppressed:{<hash>}``, a JSON value (since, until, cause) that expires
at ``until``. Memory (one process) or the ledger's Redis (every worker).

>>> from mailer.clock import ManualClock
>>> store = Suppressions.from_url("memory://", clock=ManualClock(1000.0))
>>> store.suppress("Ada@Example.com", seconds=60, cause="550 5.1.1 user unknown").until
1060.0
>>> store.suppressed("ada@example.com").cause
'550 5.1.1 user unknown'
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

from mailer.clock import Clock, system_clock
from mailer.defaults import SUPPRESS_FOR
from mailer.errors import BackendUnavailable
from mailer.limits.keys import KeyHasher
from mailer.mail.address import DEFAULT_RULES, AddressRules, normalise_address
from mailer.storage import REDIS_DOWN


@dataclass(frozen=True)
class Suppression:
    """One suppressed address: since and until (epoch seconds) and the reply that caused it."""

    since: float
    until: float
    cause: str


class Suppressions:
    """Suppress, look up and lift addresses. Thread-safe. Build with :meth:`from_url`.

    Every method takes an address (normalised like the limiter's key: ``Ada+x@Example.com`` is
    ``ada@example.com``) and raises ``InvalidAddress`` for one that is not an address, and
    :class:`~mailer.errors.BackendUnavailable` (``backend="ledger"``) when Redis is down.
    """

    def __init__(
        self,
        store: _Store,
        *,
        secret: str | bytes | None = None,
        namespace: str = "mailguard",
        clock: Clock | None = None,
        rules: AddressRules = DEFAULT_RULES,
    ) -> None:
        self._store = store
        self._hasher = KeyHasher(secret, f"{namespace}:suppressed", "suppression")
        self._clock = clock or system_clock
        self._rules = rules

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        secret: str | bytes | None = None,
        namespace: str = "mailguard",
        clock: Clock | None = None,
        client: Any = None,
    ) -> Suppressions:
        """On ``memory://`` or a Redis URL (the ledger's); ``client`` reuses a redis-py client."""
        if urlsplit(url).scheme == "memory":
            return cls(_MemoryStore(clock or system_clock), secret=secret, clock=clock)
        if client is None:
            from mailer.storage import client_from_url  # noqa: PLC0415 - redis only here

            client = client_from_url(url)
        return cls(_RedisStore(client, url), secret=secret, namespace=namespace, clock=clock)

    def key_of(self, address: str) -> str:
        """The storage key of ``address`` (a keyed hash; what logs and outcomes may show)."""
        return self._key(address)

    def suppress(self, address: str, *, seconds: float = SUPPRESS_FOR, cause: str) -> Suppression:
        """Suppress ``address`` for ``seconds`` from now because of ``cause`` (a reply)."""
        now = self._clock()
        entry = Suppression(since=now, until=now + seconds, cause=cause[:300])
        self._store.put(self._key(address), entry, seconds)
        return entry

    def suppressed(self, address: str) -> Suppression | None:
        """The suppression of ``address`` if one is in force now, else None."""
        entry = self._store.get(self._key(address))
        return entry if entry is not None and entry.until > self._clock() else None

    def plain_read(self, limit_key: str) -> tuple[Any, str] | None:
        """The redis-py client and the key that :meth:`suppressed` reads with one ``GET``, for
        a caller that reads it together with other keys of the same client (the guard: with
        the holds, one ``MGET``); None on memory. Answer with :meth:`from_raw`. ``limit_key``
        is an address normalised already (``Recipient.limit_key``): it is not parsed again."""
        if not isinstance(self._store, _RedisStore):
            return None
        return self._store.client, self._hasher.storage_key(limit_key)

    def from_raw(self, raw: bytes | str | None) -> Suppression | None:
        """What :meth:`suppressed` answers for the value read at :meth:`plain_read`'s key."""
        entry = None if raw is None else _entry(raw)
        return entry if entry is not None and entry.until > self._clock() else None

    def lift(self, address: str) -> bool:
        """Lift the suppression of ``address``; True if there was one."""
        return self._store.delete(self._key(address))

    def _key(self, address: str) -> str:
        return self._hasher.storage_key(normalise_address(address, self._rules).limit_key)


class _Store:
    """Where entries live: put with a TTL in seconds, get, delete."""

    def put(self, key: str, entry: Suppression, seconds: float) -> None:
        raise NotImplementedError

    def get(self, key: str) -> Suppression | None:
        raise NotImplementedError

    def delete(self, key: str) -> bool:
        raise NotImplementedError


class _MemoryStore(_Store):
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, Suppression] = {}

    def put(self, key: str, entry: Suppression, seconds: float) -> None:
        with self._lock:
            self._entries[key] = entry

    def get(self, key: str) -> Suppression | None:
        with self._lock:
            return self._entries.get(key)

    def delete(self, key: str) -> bool:
        with self._lock:
            return self._entries.pop(key, None) is not None


class _RedisStore(_Store):
    def __init__(self, client: Any, url: str) -> None:
        self._client = client
        self._url = url

    def put(self, key: str, entry: Suppression, seconds: float) -> None:
        value = json.dumps(asdict(entry))
        self._call(lambda: self._client.set(key, value, px=max(int(seconds * 1000), 1)))

    @property
    def client(self) -> Any:
        return self._client

    def get(self, key: str) -> Suppression | None:
        raw = self._call(lambda: self._client.get(key))
        return None if raw is None else _entry(raw)

    def delete(self, key: str) -> bool:
        return bool(self._call(lambda: self._client.delete(key)))

    def _call(self, call: Any) -> Any:
        try:
            return call()
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self._url, exc, backend="ledger") from exc


def _entry(raw: bytes | str) -> Suppression:
    return Suppression(**json.loads(raw))
