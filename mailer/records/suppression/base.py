"""The suppression list's plain data and store protocol (:mod:`mailer.records.suppression`: the
story)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Protocol

#: How much of a reply an entry keeps as its cause, in characters.
CAUSE_CHARS = 300


@dataclass(frozen=True)
class Suppression:
    """One suppressed address: since and until (epoch seconds) and the reply that caused it."""

    since: float
    until: float
    cause: str

    def to_json(self) -> str:
        """The stored value: ``{"since": ..., "until": ..., "cause": ...}``."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes | str) -> Suppression:
        """An entry from its stored value (:meth:`to_json`)."""
        return cls(**json.loads(raw))


class SuppressionStore(Protocol):
    """Where entries live, by storage key. Every method is one atomic step; entries are
    returned as stored, whether or not still in force (the caller compares ``until``)."""

    def put(self, key: str, entry: Suppression, seconds: float) -> None:
        """Store ``entry`` at ``key``, replacing any, kept at least ``seconds``."""
        ...

    def get(self, key: str) -> Suppression | None:
        """The entry at ``key``, or None."""
        ...

    def delete(self, key: str) -> bool:
        """Forget the entry at ``key``; True if there was one."""
        ...

    def shared_client(self) -> Any:
        """The redis-py client that reads a key with ``GET`` (or within one ``MGET`` beside
        other keys of the same client); None in memory."""
        ...
