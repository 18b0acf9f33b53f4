"""Where found providers are kept for every worker: the record, the store protocol and the
in-process store (:mod:`mailer.providers`: the story).

A store holds one :class:`Stored` per domain's storage key until its ``until`` (epoch
seconds), and a short lock per key (:meth:`ProviderStore.claim`) so that of many workers
meeting a new domain at once one resolves it.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Protocol

from mailer.clock import Clock, system_clock

#: Past this many entries, the memory store forgets the expired ones at the next put.
FORGET_AFTER = 10_000


@dataclass(frozen=True)
class Stored:
    """A domain's provider ``name`` and how it was found (``source``: ``known``, ``mx``,
    ``implicit``, ``fallback``), valid until epoch second ``until``."""

    name: str
    source: str
    until: float

    def encode(self) -> str:
        """The JSON value a Redis store keeps: ``{"name", "source", "until"}``."""
        return json.dumps({"name": self.name, "source": self.source, "until": self.until})

    @classmethod
    def decode(cls, raw: bytes | str | None) -> Stored | None:
        """The record of :meth:`encode`'s JSON; None for no value."""
        if raw is None:
            return None
        data = json.loads(raw)
        return cls(str(data["name"]), str(data["source"]), float(data["until"]))


class ProviderStore(Protocol):
    """Providers by storage key, shared by every worker that uses the same store. Each method
    is one atomic step; ``now`` is the caller's clock (epoch seconds)."""

    def get(self, key: str, now: float) -> Stored | None:
        """The record at ``key`` if it is still valid at ``now``, else None."""
        ...

    def put(self, key: str, stored: Stored, now: float) -> None:
        """Keep ``stored`` at ``key`` until ``stored.until`` (replacing any record there) and
        release ``key``'s lookup lock."""
        ...

    def claim(self, key: str, now: float, seconds: float) -> bool:
        """Take the lookup lock of ``key`` for ``seconds`` (or until a :meth:`put`): True for
        the one caller that took it, False while another holds it."""
        ...


class MemoryProviderStore:
    """:class:`ProviderStore` in a dict: one process (tests, the demo, a threads pool); the
    ``clock`` only prunes expired entries (validity is judged on the caller's ``now``)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or system_clock
        self._lock = threading.Lock()
        self._records: dict[str, Stored] = {}
        self._claims: dict[str, float] = {}

    def get(self, key: str, now: float) -> Stored | None:
        with self._lock:
            stored = self._records.get(key)
        return stored if stored is not None and now < stored.until else None

    def put(self, key: str, stored: Stored, now: float) -> None:
        with self._lock:
            self._records[key] = stored
            self._claims.pop(key, None)
            if len(self._records) > FORGET_AFTER:
                at = self._clock()
                self._records = {k: s for k, s in self._records.items() if at < s.until}
                self._claims = {k: u for k, u in self._claims.items() if at < u}

    def claim(self, key: str, now: float, seconds: float) -> bool:
        with self._lock:
            if self._claims.get(key, float("-inf")) > now:
                return False
            self._claims[key] = now + seconds
            return True
