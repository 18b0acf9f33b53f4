"""Holds' plain data, the pure doubling rule and the store protocol (:mod:`mailer.records.holds`:
the story)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

#: The scope of a hold on every mail (the server throttles the sender).
SENDER = "sender"
#: The scope of a hold on one recipient's mails.
RECIPIENT = "recipient"

#: How much of a reply a hold keeps as its cause, in characters.
CAUSE_CHARS = 300


@dataclass(frozen=True)
class Hold:
    """One hold: in force from ``since`` to ``until`` (epoch seconds) because of ``cause`` (the
    reply); ``level`` is how many times it was doubled (0: the first)."""

    until: float
    level: int
    cause: str
    since: float


def next_hold(
    previous: Hold | None, now: float, seconds: float, max_hold: float, cause: str
) -> Hold:
    """The hold that a new reply sets: ``seconds`` from now, or, while ``previous`` is in force,
    twice its length (capped at ``max_hold``, never less than ``seconds``); pure."""
    if previous is None or previous.until <= now:
        return Hold(until=now + seconds, level=0, cause=cause[:CAUSE_CHARS], since=now)
    doubled = min(2 * (previous.until - previous.since), max_hold)
    return Hold(
        until=now + max(seconds, doubled),
        level=previous.level + 1,
        cause=cause[:CAUSE_CHARS],
        since=now,
    )


def decode_hold(raw: bytes | str | None) -> Hold | None:
    """A hold from its stored JSON ``{until, level, cause, since}``; None for no value."""
    if raw is None:
        return None
    data = json.loads(raw)
    return Hold(
        until=float(data["until"]),
        level=int(data["level"]),
        cause=str(data["cause"]),
        since=float(data["since"]),
    )


class HoldStore(Protocol):
    """Where holds live, by storage key. Every method is one atomic step; holds are returned
    as stored, whether or not still in force (the caller compares ``until`` with its clock)."""

    def put(self, key: str, now: float, seconds: float, max_hold: float, cause: str) -> Hold:
        """Set the hold at ``key`` to :func:`next_hold` of the one stored there (read, double
        and write at once: two workers throttled together double it once each) and return it.
        It is kept until its end."""
        ...

    def get(self, keys: list[str]) -> list[Hold | None]:
        """The holds stored at ``keys``, in their order (one round trip)."""
        ...

    def shared_client(self) -> Any:
        """The redis-py client that reads these keys with one ``MGET`` beside other keys of the
        same client; None where that cannot be done (memory, Cluster: keys in other slots)."""
        ...
