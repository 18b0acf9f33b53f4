"""The transport's hold: our own side is refused (credentials, certificate, sender), so no
worker sends through the relay until one probe mail is accepted.

A refusal that no other mail would escape (``535 5.7.8``, ``530 5.7.0``, a certificate the
system does not trust, ``553 5.1.8`` for our sender: :data:`~mailer.mail.replies.Action.
HOLD_TRANSPORT`) starts the hold (:meth:`TransportHold.start`: the first to write it is told
so, and logs it). It lasts ``first`` seconds (:data:`FIRST`, 1 min, capped by ``max_hold``);
when it has passed, the first mail to come claims the probe (:meth:`TransportHold.claim`): it
goes to the relay, and the hold lasts twice as long from then (up to ``max_hold``, 15 min by
default), so the others wait for the next probe. The relay accepting a mail lifts the hold
(:meth:`TransportHold.lift`; so does ``mailguard transport resume``). It never ends by itself:
a stored hold is in force until lifted (the key is kept :data:`KEEP` seconds after each write).

The relay's hold (credentials, certificate: every mail) is ``<namespace>:hold:{transport}``; a
refusal of one sender (``5.1.7`` / ``5.1.8``, "Sender address rejected") holds that sender's
mails alone, ``<namespace>:hold:{transport}:<keyed hash of the sender>``; each a JSON
:class:`~mailer.records.holds.base.Hold`, one Cluster slot for all, beside the sender's hold
(memory: one process; the limiter's Redis: every worker).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mailer.clock import Clock, system_clock
from mailer.limits.keys import KeyHasher
from mailer.records.holds.base import CAUSE_CHARS, Hold, HoldStore

#: The scope of the transport's hold (every mail through this relay).
TRANSPORT = "transport"
#: The hold's first length, in seconds, before the first probe (capped by ``max_hold``).
FIRST = 60.0
#: How long a stored transport hold is kept after its last write, in seconds (a week: longer
#: than any mail waits; a hold that old is started again by the next refusal).
KEEP = 7 * 86_400.0


def start_transport(stored: Hold | None, now: float, seconds: float, cause: str) -> Hold:
    """The hold a refusal at ``now`` leaves (pure): ``stored`` as it is (not ``written``), else a
    new one lasting ``seconds``, ``written``."""
    if stored is not None:
        return stored
    hold = Hold(until=now + seconds, level=0, cause=cause[:CAUSE_CHARS], since=now)
    return replace(hold, written=True)


def claim_probe(stored: Hold | None, now: float, max_hold: float) -> Hold | None:
    """The hold after a mail asks at ``now`` to probe the relay (pure): None when none is
    stored; ``stored`` (not ``written``) while it is in force; else the caller is the probe and
    the hold lasts twice its length from now, capped at ``max_hold`` (``written``)."""
    if stored is None or now < stored.until:
        return stored
    length = min(2 * stored.length, max_hold)
    hold = Hold(until=now + length, level=stored.level + 1, cause=stored.cause, since=now)
    return replace(hold, written=True)


class TransportHold:
    """Start, probe, read and lift the transport's holds (see the module). Thread-safe; raises
    :class:`~mailer.errors.BackendUnavailable` (``limiter``) when its Redis is down.

    ``sender`` None names the relay's hold (credentials, certificate: every mail); an address
    names that sender's hold (the relay refuses that sender alone), keyed by its keyed hash."""

    def __init__(
        self,
        store: HoldStore,
        *,
        secret: str | bytes | None = None,
        namespace: str = "mailguard",
        clock: Clock | None = None,
        max_hold: float,
    ) -> None:
        self._store = store
        self._clock = clock or system_clock
        self._hasher = KeyHasher(secret, f"{namespace}:hold:{TRANSPORT}", TRANSPORT)
        self.max_hold = max_hold
        #: The storage key of the relay's hold; a sender's hold is ``<key>:<keyed hash>``.
        self.key = f"{namespace}:hold:{{{TRANSPORT}}}"

    def key_for(self, sender: str | None) -> str:
        """The storage key of the relay's hold (``sender`` None) or of ``sender``'s."""
        if not sender:
            return self.key
        return f"{self.key}:{self._hasher.digest(sender.strip().lower()).hex()}"

    def now(self) -> float:
        """The hold's clock, epoch seconds (its ``since`` and ``until`` are on it)."""
        return self._clock()

    def start(self, cause: str, sender: str | None = None) -> Hold:
        """Hold the transport (the relay, or ``sender`` alone) for :data:`FIRST` seconds (at
        most ``max_hold``) unless it is held already; the hold stored, ``written`` when this
        call wrote it."""
        first = min(FIRST, self.max_hold)
        return self._store.start(self.key_for(sender), self._clock(), first, cause, keep=KEEP)

    def claim(self, sender: str | None = None) -> Hold | None:
        """Ask to probe the relay now: the hold stored (None: none), ``written`` when the caller
        is the probe (the hold's time had passed; it now lasts until the next probe)."""
        key = self.key_for(sender)
        return self._store.claim(key, self._clock(), self.max_hold, keep=KEEP)

    def current(self, sender: str | None = None) -> Hold | None:
        """The hold as stored (in force until lifted, whatever its ``until``)."""
        return self._store.get([self.key_for(sender)])[0]

    def held(self) -> list[Hold]:
        """Every transport hold stored: the relay's and each sender's (one scan)."""
        return [hold for _, hold in self._store.scan(self.key)]

    def shared_client(self) -> Any:
        """The redis-py client that reads the holds' keys beside other keys in one ``MGET``;
        None on memory and Cluster."""
        return self._store.shared_client()

    def lift(self, sender: str | None = None) -> bool:
        """Lift the relay's hold (or ``sender``'s); True when there was one."""
        return self._store.lift(self.key_for(sender))

    def lift_all(self) -> int:
        """Lift every transport hold; how many there were."""
        return sum(self._store.lift(key) for key, _ in self._store.scan(self.key))
