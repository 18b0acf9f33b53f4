"""The suppression list's plain data and store protocol (:mod:`mailer.records.suppression`: the
story)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, get_args

#: How much of a reply an entry keeps as its cause, in characters.
CAUSE_CHARS = 300

#: Seconds a suppression "for ever" lasts (a complaint): 100 years, a finite time so every
#: reader compares and prints it as any other.
FOREVER = 100 * 365 * 86_400.0

#: Why an address is suppressed: ``smtp`` (a hard bounce in the SMTP reply), ``bounce`` (a hard
#: bounce reported later, by an ESP's webhook), ``complaint`` (a spam complaint), ``rejected``
#: (the ESP refused to send to it), ``hand`` (an operator: ``mailguard suppress``),
#: ``unsubscribed`` (a one-click unsubscribe: only the sender's bulk kinds, see
#: :mod:`mailer.unsubscribe`).
Source = Literal["smtp", "bounce", "complaint", "rejected", "hand", "unsubscribed"]
SOURCES: tuple[Source, ...] = get_args(Source)

#: How each source is shown to people.
SOURCE_WORDS: dict[str, str] = {
    "smtp": "SMTP reply",
    "bounce": "bounce",
    "complaint": "complaint",
    "rejected": "rejected by the ESP",
    "hand": "by hand",
    "unsubscribed": "unsubscribed from a sender's bulk kinds",
}

_REPLY = re.compile(r"^[245]\d\d\b")
#: The cause's first word for an entry recorded from a webhook event (``bounced: ...``).
_EVENTS: dict[str, Source] = {
    "bounced": "bounce",
    "complained": "complaint",
    "rejected": "rejected",
    "unsubscribed": "unsubscribed",
}


def source_of(cause: str) -> Source:
    """The source an entry's cause tells: ``smtp`` for a cause that starts with a reply code
    (``550 5.1.1 ...``), the event's for a webhook's (``bounced: ...``, ``complained``), else
    ``hand``. So the stored value leaves the source out when the cause tells it
    (:meth:`Suppression.to_json`), and reads it back from the cause."""
    if _REPLY.match(cause):
        return "smtp"
    return _EVENTS.get(cause.split(":", 1)[0].strip(), "hand")


@dataclass(frozen=True)
class Suppression:
    """One suppressed address: since and until (epoch seconds), the reply or event that caused
    it, and its :data:`Source`."""

    since: float
    until: float
    cause: str
    source: Source = "smtp"

    @property
    def forever(self) -> bool:
        """Whether it lasts until lifted (a complaint): :data:`FOREVER` or longer (to a
        second: epoch floats that far ahead round)."""
        return self.until - self.since >= FOREVER - 1.0

    def to_json(self) -> str:
        """The stored value: ``{"since": ..., "until": ..., "cause": ...}``, with ``"source"``
        only when the cause does not tell it (:func:`source_of`)."""
        value = asdict(self)
        if self.source == source_of(self.cause):
            del value["source"]
        return json.dumps(value)

    @classmethod
    def from_json(cls, raw: bytes | str) -> Suppression:
        """An entry from its stored value (:meth:`to_json`). An entry stored without a source
        gets the one its cause tells (:func:`source_of`); unknown fields are ignored."""
        data = json.loads(raw)
        cause = str(data.get("cause", ""))
        source = data.get("source")
        return cls(
            since=float(data["since"]),
            until=float(data["until"]),
            cause=cause,
            source=source if source in SOURCES else source_of(cause),
        )


class SuppressionStore(Protocol):
    """Where entries live, by storage key. Every method is one atomic step; entries are
    returned as stored, whether or not still in force (the caller compares ``until``)."""

    def put(self, key: str, entry: Suppression, seconds: float) -> None:
        """Store ``entry`` at ``key``, replacing any, kept at least ``seconds``."""
        ...

    def put_longer(self, key: str, entry: Suppression, seconds: float, now: float) -> Suppression:
        """Store ``entry`` at ``key`` unless the entry there is in force at ``now`` and lasts
        at least as long (a complaint's is not shortened by a later bounce); the entry kept."""
        ...

    def get(self, key: str) -> Suppression | None:
        """The entry at ``key``, or None."""
        ...

    def delete(self, key: str) -> bool:
        """Forget the entry at ``key``; True if there was one."""
        ...

    def scan(self, prefix: str) -> list[tuple[str, Suppression]]:
        """Every entry whose key starts with ``prefix`` (an operator's listing, not a hot
        path: Redis ``SCAN``)."""
        ...

    def shared_client(self) -> Any:
        """The redis-py client that reads a key with ``GET`` (or within one ``MGET`` beside
        other keys of the same client); None in memory."""
        ...


def keeps(old: Suppression | None, new: Suppression, now: float) -> bool:
    """Whether ``old`` stays instead of ``new``: in force at ``now`` and lasting as long."""
    return old is not None and old.until > now and old.until >= new.until
