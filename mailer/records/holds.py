"""Holds: the mail server asked us to slow down, so nobody sends to it (or to one recipient) for
a while.

A throttling reply (``454 4.7.0 Throttling failure``, ``421 4.7.28``; see
:mod:`mailer.mail.replies`) holds the **sender**: no worker opens an SMTP transaction until the hold
ends, and the mails meanwhile are booked after it by the limiter. ``450 4.2.1`` holds one
**recipient** alone. A new hold while one is active doubles the previous one (``level`` + 1),
up to ``max_hold``; a reply's stated delay is honoured as given.

Holds live where the limiter lives (memory: one process; the limiter's Redis: every worker),
one key per hold, a JSON value ``{until, level, cause, since}`` expiring at ``until``:
``<namespace>:hold:sender`` and ``<namespace>:hold:{<keyed hash of the recipient's limit
key>}`` (no address in clear). :meth:`Holds.active` reads both in one round trip.

>>> from mailer.clock import ManualClock
>>> holds = Holds.from_url("memory://", clock=ManualClock(1000.0), max_hold=300)
>>> holds.hold_sender(60, "454 4.7.0 Throttling failure").until
1060.0
>>> holds.hold_sender(60, "454 4.7.0 Throttling failure").until  # again within it: doubled
1120.0
>>> holds.active("ada@example.com")[0].level
1
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mailer.clock import Clock, system_clock
from mailer.defaults import THROTTLE_HOLD_MAX
from mailer.errors import BackendUnavailable
from mailer.limits.keys import KeyHasher, check_key
from mailer.storage import REDIS_DOWN

SENDER = "sender"
RECIPIENT = "recipient"


@dataclass(frozen=True)
class Hold:
    """One hold: in force from ``since`` to ``until`` (epoch seconds) because of ``cause`` (the
    reply); ``level`` is how many times it was doubled (0: the first)."""

    until: float
    level: int
    cause: str
    since: float


class Holds:
    """Set and read holds. Thread-safe. Build with :meth:`from_url`.

    Raises :class:`~mailer.errors.BackendUnavailable` (``backend="limiter"``) when Redis is
    down: the guard then does what it does when the limiter is down (``fail_closed`` defers).
    """

    def __init__(
        self,
        store: _Store,
        *,
        secret: str | bytes | None = None,
        namespace: str = "mailguard",
        clock: Clock | None = None,
        max_hold: float = THROTTLE_HOLD_MAX,
    ) -> None:
        if max_hold <= 0:
            raise ValueError(f"max_hold must be > 0 s, got {max_hold}")
        self._store = store
        self._hasher = KeyHasher(secret, f"{namespace}:hold", "hold")
        self._sender_key = f"{namespace}:hold:{SENDER}"
        self._clock = clock or system_clock
        self.max_hold = max_hold

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        secret: str | bytes | None = None,
        namespace: str = "mailguard",
        clock: Clock | None = None,
        client: Any = None,
        max_hold: float = THROTTLE_HOLD_MAX,
    ) -> Holds:
        """On ``memory://`` or a Redis URL (the limiter's); ``client`` reuses a redis-py client."""
        scheme = urlsplit(url).scheme
        clock = clock or system_clock
        store: _Store
        if scheme == "memory":
            store = _MemoryStore(clock)
        else:
            if client is None:
                from mailer.storage import client_from_url  # noqa: PLC0415 - redis only

                client = client_from_url(url)
            store = _RedisStore(client, url, cluster=scheme.endswith("+cluster"))
        return cls(store, secret=secret, namespace=namespace, clock=clock, max_hold=max_hold)

    def key_of(self, key: str) -> str:
        """The storage key of the recipient hold of limit key ``key`` (a keyed hash)."""
        return self._hasher.storage_key(check_key(key))

    def hold_sender(self, seconds: float, cause: str) -> Hold:
        """Hold the sender for ``seconds`` (doubled while a hold is active); the hold now."""
        return self._hold(self._sender_key, seconds, cause)

    def hold_recipient(self, key: str, seconds: float, cause: str) -> Hold:
        """Hold the recipient of limit key ``key`` alone, like :meth:`hold_sender`."""
        return self._hold(self.key_of(key), seconds, cause)

    def active(self, key: str | None = None) -> tuple[Hold | None, Hold | None]:
        """The sender's hold and the recipient's (limit key ``key``) in force now, in one round
        trip; None for none."""
        keys = [self._sender_key] if key is None else [self._sender_key, self.key_of(key)]
        now = self._clock()
        found = [h if h is not None and h.until > now else None for h in self._store.get(keys)]
        return found[0], found[1] if key is not None else None

    def plain_read(self, key: str) -> tuple[Any, list[str]] | None:
        """The redis-py client and the keys that :meth:`active` (with ``key``) reads with one
        ``MGET``, for a caller that reads them together with other keys of the same client;
        None on memory and on Cluster. Answer with :meth:`from_raws`."""
        store = self._store
        if not isinstance(store, _RedisStore) or store.cluster:
            return None
        return store.client, [self._sender_key, self.key_of(key)]

    def from_raws(self, raws: list[Any]) -> tuple[Hold | None, Hold | None]:
        """What :meth:`active` answers for the values read at :meth:`plain_read`'s keys."""
        now = self._clock()
        sender, recipient = (_hold(raw) for raw in raws)
        return (
            sender if sender is not None and sender.until > now else None,
            recipient if recipient is not None and recipient.until > now else None,
        )

    def sender(self) -> Hold | None:
        """The sender's hold in force now, or None."""
        return self.active()[0]

    def lift_sender(self) -> bool:
        """End the sender's hold now; True if there was one."""
        return self._store.delete(self._sender_key)

    def _hold(self, storage_key: str, seconds: float, cause: str) -> Hold:
        if not seconds > 0:
            raise ValueError(f"a hold lasts > 0 s, got {seconds}")
        return self._store.put(storage_key, self._clock(), float(seconds), self.max_hold, cause)


def next_hold(
    previous: Hold | None, now: float, seconds: float, max_hold: float, cause: str
) -> Hold:
    """The hold that a new reply sets: ``seconds`` from now, or, while ``previous`` is in force,
    twice its length (capped at ``max_hold``, never less than ``seconds``); pure."""
    if previous is None or previous.until <= now:
        return Hold(until=now + seconds, level=0, cause=cause[:300], since=now)
    doubled = min(2 * (previous.until - previous.since), max_hold)
    return Hold(
        until=now + max(seconds, doubled), level=previous.level + 1, cause=cause[:300], since=now
    )


class _Store:
    """Where holds live: put (read, double, write atomically), get many at once, delete."""

    def put(self, key: str, now: float, seconds: float, max_hold: float, cause: str) -> Hold:
        raise NotImplementedError

    def get(self, keys: list[str]) -> list[Hold | None]:
        raise NotImplementedError

    def delete(self, key: str) -> bool:
        raise NotImplementedError


class _MemoryStore(_Store):
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._holds: dict[str, Hold] = {}

    def put(self, key: str, now: float, seconds: float, max_hold: float, cause: str) -> Hold:
        with self._lock:
            hold = next_hold(self._holds.get(key), now, seconds, max_hold, cause)
            self._holds[key] = hold
            if len(self._holds) > 10_000:  # forget ended holds now and then
                now = self._clock()
                self._holds = {k: h for k, h in self._holds.items() if h.until > now}
            return hold

    def get(self, keys: list[str]) -> list[Hold | None]:
        with self._lock:
            return [self._holds.get(key) for key in keys]

    def delete(self, key: str) -> bool:
        with self._lock:
            return self._holds.pop(key, None) is not None


#: Read the hold at KEYS[1], double it while in force (ARGV: now, seconds, max_hold, cause;
#: seconds as floats), write it with a TTL to its end, and return the new value. Atomic, so two
#: workers throttled at once double it once each, never lose a write.
_PUT = """
local now, seconds, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local level, since, length = 0, now, seconds
local raw = redis.call('GET', KEYS[1])
if raw then
  local old = cjson.decode(raw)
  if tonumber(old['until']) > now then
    local doubled = math.min(2 * (tonumber(old['until']) - tonumber(old.since)), cap)
    length = math.max(seconds, doubled)
    level = tonumber(old.level) + 1
  end
end
local value = cjson.encode({['until'] = now + length, level = level, cause = ARGV[4], since = now})
redis.call('SET', KEYS[1], value, 'PX', math.max(math.ceil(length * 1000), 1))
return value
"""


class _RedisStore(_Store):
    def __init__(self, client: Any, url: str, *, cluster: bool) -> None:
        self._client = client
        self._url = url
        self._cluster = cluster  # keys in other slots: a pipeline, not MGET
        self._put = client.register_script(_PUT)

    @property
    def client(self) -> Any:
        return self._client

    @property
    def cluster(self) -> bool:
        return self._cluster

    def put(self, key: str, now: float, seconds: float, max_hold: float, cause: str) -> Hold:
        args = [repr(now), repr(seconds), repr(max_hold), cause[:300]]
        raw = self._call(lambda: self._put(keys=[key], args=args))
        return _hold(raw)  # type: ignore[return-value]

    def get(self, keys: list[str]) -> list[Hold | None]:
        if self._cluster and len(keys) > 1:

            def read() -> Any:
                pipe = self._client.pipeline(transaction=False)
                for key in keys:
                    pipe.get(key)
                return pipe.execute()

            raws = self._call(read)
        else:
            raws = self._call(lambda: self._client.mget(keys))
        return [_hold(raw) for raw in raws]

    def delete(self, key: str) -> bool:
        return bool(self._call(lambda: self._client.delete(key)))

    def _call(self, call: Any) -> Any:
        try:
            return call()
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self._url, exc, backend="limiter") from exc


def _hold(raw: Any) -> Hold | None:
    if raw is None:
        return None
    data = json.loads(raw)
    return Hold(
        until=float(data["until"]),
        level=int(data["level"]),
        cause=str(data["cause"]),
        since=float(data["since"]),
    )


__all__ = ["RECIPIENT", "SENDER", "Hold", "Holds", "next_hold"]
