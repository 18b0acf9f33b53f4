"""Holds' plain data, the pure doubling rule and the store protocol (:mod:`mailer.records.holds`:
the story)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
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
    reply); ``level`` is how many times it was doubled (0: the first). ``stated``: its length
    is the delay the reply stated; False when it is a default or a doubling (a guess).
    ``written``: True on the hold a store's ``put`` answers when that put wrote it (a new hold,
    a doubling, a longer stated delay); False when the put found the throttling answered
    already, and on a hold read back. Not stored, not compared."""

    until: float
    level: int
    cause: str
    since: float
    stated: bool = False
    written: bool = field(default=False, compare=False)

    @property
    def length(self) -> float:
        """How long the hold lasts, in seconds."""
        return self.until - self.since

    def remembered(self, now: float) -> bool:
        """Whether a new throttling reply at ``now`` continues this hold's throttling: while it
        is in force and for one more length after its end."""
        return now < self.until + self.length


def next_hold(
    previous: Hold | None,
    now: float,
    seconds: float,
    max_hold: float,
    cause: str,
    *,
    asked: float | None = None,
    stated: bool = False,
) -> Hold:
    """The hold that a new reply sets (pure). ``seconds``: the reply's stated delay
    (``stated``) or the default first length; ``asked``: when the refused send was admitted
    (epoch seconds; None: now).

    - No ``previous``, or one no longer remembered (:meth:`Hold.remembered`): ``seconds`` from
      now, level 0.
    - A reply to a send admitted before ``previous`` began: the same throttling, already
      answered: ``previous`` as it is (made to last until ``now + seconds`` if the reply
      stated a delay that ends later).
    - Else the throttling continues: twice ``previous``'s length (capped at ``max_hold``, never
      less than ``seconds``), level + 1.
    """
    cause = cause[:CAUSE_CHARS]
    asked = now if asked is None else asked
    if previous is None or not previous.remembered(now):
        return Hold(until=now + seconds, level=0, cause=cause, since=now, stated=stated)
    if asked < previous.since:
        if not stated or now + seconds <= previous.until:
            return previous
        return Hold(now + seconds, previous.level, cause, since=now, stated=stated)
    length = max(seconds, min(2 * previous.length, max_hold))
    return Hold(
        until=now + length,
        level=previous.level + 1,
        cause=cause,
        since=now,
        stated=stated and length == seconds,
    )


def decode_hold(raw: bytes | str | None) -> Hold | None:
    """A hold from its stored JSON ``{until, level, cause, since, stated}``; None for no
    value."""
    if raw is None:
        return None
    data = json.loads(raw)
    return Hold(
        until=float(data["until"]),
        level=int(data["level"]),
        cause=str(data["cause"]),
        since=float(data["since"]),
        stated=bool(data.get("stated", False)),
    )


class HoldStore(Protocol):
    """Where holds live, by storage key. Every method is one atomic step; holds are returned
    as stored, whether or not still in force (the caller compares ``until`` with its clock)."""

    def put(
        self,
        key: str,
        now: float,
        seconds: float,
        max_hold: float,
        cause: str,
        *,
        asked: float | None = None,
        stated: bool = False,
    ) -> Hold:
        """Set the hold at ``key`` to :func:`next_hold` of the one stored there (read, double
        and write at once: two workers throttled together double it once each) and return it,
        ``written`` when this put wrote it (of two puts at once, only one writes a new hold).
        It is kept one length past its end (:meth:`Hold.remembered`)."""
        ...

    def get(self, keys: list[str]) -> list[Hold | None]:
        """The holds stored at ``keys``, in their order (one round trip)."""
        ...

    def witness(self, key: str, member: str, now: float, window: float, count: int) -> int:
        """Add ``member`` (a recipient's keyed hash) at ``now`` to the evidence set at ``key``,
        forget the members older than ``window`` seconds and answer how many distinct members
        are left; at ``count`` or more the set is emptied (one caller sees it reach ``count``)."""
        ...

    def start(self, key: str, now: float, seconds: float, cause: str, *, keep: float) -> Hold:
        """The transport's hold at ``key``: the one stored, else a new one lasting ``seconds``
        (``written``); kept ``keep`` seconds (:func:`~mailer.records.holds.transport.
        start_transport`, at once)."""
        ...

    def claim(self, key: str, now: float, max_hold: float, *, keep: float) -> Hold | None:
        """Claim the probe of the transport's hold at ``key``
        (:func:`~mailer.records.holds.transport.claim_probe`, at once: one caller is the probe)."""
        ...

    def lift(self, key: str) -> bool:
        """Delete the hold at ``key``; True when there was one."""
        ...

    def scan(self, prefix: str) -> list[tuple[str, Hold]]:
        """Every hold whose key starts with ``prefix``, with its key."""
        ...

    def shared_client(self) -> Any:
        """The redis-py client that reads these keys with one ``MGET`` beside other keys of the
        same client; None where that cannot be done (memory, Cluster: keys in other slots)."""
        ...
