"""The suppression list as the guard and the CLI use it: normalised addresses, keyed hashes and
the clock over a :class:`~mailer.records.suppression.base.SuppressionStore`, and
:func:`suppressions_from_url`, which picks the store by the URL's scheme."""

from __future__ import annotations

from typing import Any

from mailer.clock import Clock, system_clock
from mailer.defaults import SUPPRESS_FOR
from mailer.limits.keys import KeyHasher
from mailer.mail.address import DEFAULT_RULES, AddressRules, normalise_address
from mailer.records.reputation.base import sender_of
from mailer.records.reputation.keyed import sid_of
from mailer.records.suppression.base import (
    CAUSE_CHARS,
    FOREVER,
    Source,
    Suppression,
    SuppressionStore,
    source_of,
)
from mailer.records.suppression.memory import MemorySuppressionStore
from mailer.records.suppression.redis import RedisSuppressionStore
from mailer.storage import client_from_url, is_memory

#: What follows an address's key in the key of one of its unsubscriptions (then the sender's
#: short hash): ``<ns>:suppressed:{<hash>}:unsubscribed:<sender hash>``.
_SCOPED = ":unsubscribed:"


class Suppressions:
    """Suppress, look up and lift addresses. Thread-safe. Build with
    :func:`suppressions_from_url` (or :meth:`from_url`).

    Every method takes an address (normalised like the limiter's key: ``Ada+x@Example.com`` is
    ``ada@example.com``) and raises ``InvalidAddress`` for one that is not an address, and
    :class:`~mailer.errors.BackendUnavailable` (``backend="ledger"``) when Redis is down.
    """

    def __init__(
        self,
        store: SuppressionStore,
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
        """The same as :func:`suppressions_from_url`."""
        return suppressions_from_url(
            url, secret=secret, namespace=namespace, clock=clock, client=client
        )

    def key_of(self, address: str) -> str:
        """The storage key of ``address`` (a keyed hash; what logs and outcomes may show)."""
        return self._key(address)

    def suppress(
        self,
        address: str,
        *,
        seconds: float = SUPPRESS_FOR,
        cause: str,
        source: Source | None = None,
    ) -> Suppression:
        """Suppress ``address`` for ``seconds`` from now because of ``cause`` (a reply), replacing
        any entry. ``source`` says where it came from (:data:`~mailer.records.suppression.base.
        Source`; default: ``smtp`` for a cause that starts with a reply code, else ``hand``)."""
        now = self._clock()
        entry = Suppression(
            since=now,
            until=now + seconds,
            cause=cause[:CAUSE_CHARS],
            source=source or source_of(cause),
        )
        self._store.put(self._key(address), entry, seconds)
        return entry

    def record(
        self, address: str, *, seconds: float, cause: str, source: Source, at: float | None = None
    ) -> Suppression:
        """Suppress ``address`` for ``seconds`` from ``at`` (epoch seconds, default now: when
        the bounce or complaint happened) unless an entry in force lasts as long already; the
        entry in force afterwards. For events that arrive late and in any order (webhooks): a
        complaint's suppression is never shortened by a later bounce."""
        now = self._clock()
        since = now if at is None else min(at, now)
        entry = Suppression(
            since=since, until=since + seconds, cause=cause[:CAUSE_CHARS], source=source
        )
        keep_for = max(entry.until - now, 0.001)
        return self._store.put_longer(self._key(address), entry, keep_for, now)

    def suppressed(self, address: str) -> Suppression | None:
        """The suppression of ``address`` if one is in force now, else None."""
        return self.suppressed_key(normalise_address(address, self._rules).limit_key)

    def suppressed_key(self, limit_key: str) -> Suppression | None:
        """:meth:`suppressed` for an address normalised already (``Recipient.limit_key``, what
        the guard holds): it is not parsed again."""
        entry = self._store.get(self._hasher.storage_key(limit_key))
        return entry if entry is not None and entry.until > self._clock() else None

    def plain_read(self, limit_key: str) -> tuple[Any, str] | None:
        """The redis-py client and the key that :meth:`suppressed` reads with one ``GET``, for
        a caller that reads it together with other keys of the same client (the guard: with
        the holds, one ``MGET``); None on memory. Answer with :meth:`from_raw`. ``limit_key``
        is an address normalised already (``Recipient.limit_key``): it is not parsed again."""
        client = self._store.shared_client()
        return None if client is None else (client, self._hasher.storage_key(limit_key))

    def from_raw(self, raw: bytes | str | None) -> Suppression | None:
        """What :meth:`suppressed` answers for the value read at :meth:`plain_read`'s key."""
        entry = None if raw is None else Suppression.from_json(raw)
        return entry if entry is not None and entry.until > self._clock() else None

    def lift(self, address: str) -> bool:
        """Lift the suppression of ``address`` and its unsubscriptions; True if there was one."""
        key = self._key(address)
        scoped = [k for k, _ in self._store.scan(key + _SCOPED)]
        return any([self._store.delete(key), *map(self._store.delete, scoped)])

    def hash_of(self, limit_key: str) -> str:
        """The keyed hash of a normalised address (``Recipient.limit_key``): what an
        unsubscribe token names instead of the address."""
        return self._hasher.storage_key(limit_key).split("{", 1)[1].rstrip("}")

    def unsubscribe(self, hashed: str, sender: str, *, how: str = "one-click") -> Suppression:
        """Unsubscribe the recipient whose keyed hash is ``hashed`` (:meth:`hash_of`) from
        ``sender``'s bulk kinds, until lifted (``mailguard unsuppress``); the entry."""
        now = self._clock()
        entry = Suppression(
            since=now,
            until=now + FOREVER,
            cause=f"unsubscribed: {how}, from {sender}"[:CAUSE_CHARS],
            source="unsubscribed",
        )
        self._store.put(self._scoped_key(hashed, sender), entry, FOREVER)
        return entry

    def unsubscribed_read(self, limit_key: str, sender: str) -> tuple[Any, str] | None:
        """As :meth:`plain_read`, for the recipient's unsubscription from ``sender``'s bulk
        kinds (answer with :meth:`from_raw`); None on memory."""
        client = self._store.shared_client()
        key = self._scoped_key(self.hash_of(limit_key), sender)
        return None if client is None else (client, key)

    def unsubscribed(self, limit_key: str, sender: str) -> Suppression | None:
        """The recipient's unsubscription from ``sender``'s bulk kinds, if one is in force."""
        entry = self._store.get(self._scoped_key(self.hash_of(limit_key), sender))
        return entry if entry is not None and entry.until > self._clock() else None

    def unsubscriptions(self, address: str) -> list[Suppression]:
        """Every unsubscription of ``address`` in force (one per sender; an operator's
        listing: a Redis ``SCAN``)."""
        now = self._clock()
        found = self._store.scan(self._key(address) + _SCOPED)
        return sorted((e for _, e in found if e.until > now), key=lambda e: e.since)

    def _scoped_key(self, hashed: str, sender: str) -> str:
        prefix = self._hasher.storage_key("x").split("{", 1)[0]
        return f"{prefix}{{{hashed}}}{_SCOPED}{sid_of(sender_of(sender))}"

    def _key(self, address: str) -> str:
        return self._hasher.storage_key(normalise_address(address, self._rules).limit_key)


def suppressions_from_url(
    url: str,
    *,
    secret: str | bytes | None = None,
    namespace: str = "mailguard",
    clock: Clock | None = None,
    client: Any = None,
    rules: AddressRules = DEFAULT_RULES,
) -> Suppressions:
    """The suppression list on ``memory://`` or a Redis URL (the ledger's); ``client`` reuses
    a redis-py client. Times are ``clock``'s on both (an entry carries its own ``until``);
    ``rules`` check the addresses (the reserved domains admitted)."""
    store: SuppressionStore
    if is_memory(url):
        store = MemorySuppressionStore()
    else:
        store = RedisSuppressionStore(client if client is not None else client_from_url(url), url)
    return Suppressions(store, secret=secret, namespace=namespace, clock=clock, rules=rules)
