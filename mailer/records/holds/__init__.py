"""Holds: the mail server asked us to slow down, so nobody sends to it (or to one recipient) for
a while; the transport's hold when it refuses our own side; the sender's pace after a hold.

A reply that states a rate or quota (``454 4.7.0 Throttling failure``, ``421 4.7.28``; see
:mod:`mailer.mail.replies`) holds the **sender**: no worker opens an SMTP transaction until the
hold ends, and the mails meanwhile are booked after it by the limiter. ``450 4.2.1`` holds one
**recipient** alone. Temporary failures of several distinct recipients within a short window
(:meth:`Holds.witness`) are evidence enough to hold the sender too. A hold lasts the reply's
stated delay or the caller's first length; a new reply while the throttling continues (the
hold in force, or ended less than its length ago) doubles it (``level`` + 1), up to
``max_hold``; a reply to a send admitted before the hold began does not (the same throttling).

Holds live where the limiter lives (memory: one process; the limiter's Redis: every worker),
one key per hold, a JSON value ``{until, level, cause, since, stated}`` expiring one length
after ``until``: ``<namespace>:hold:sender`` and ``<namespace>:hold:{<keyed hash of the
recipient's limit key>}`` (no address in clear); the evidence in ``<namespace>:hold:evidence``,
a sorted set of recipients' keyed hashes. :meth:`Holds.active` reads both holds in one round
trip.

A rate reply that names its mailbox provider (Gmail's ``4.7.28``...) for a recipient at that
provider holds that provider's mail alone, ``<namespace>:hold:provider:<name>``, with a pace of
its own after it; the sender's pace is kept per relay (:func:`holds_from_url`'s ``relay``).

- :mod:`mailer.records.holds.base`: :class:`Hold`, :func:`next_hold` (the doubling rule, pure),
  the :class:`HoldStore` protocol
- :mod:`mailer.records.holds.memory`: :class:`MemoryHoldStore`, inside one process
- :mod:`mailer.records.holds.redis`: :class:`RedisHoldStore`; its scripts ``lua/put.lua`` and
  ``lua/witness.lua``
- :mod:`mailer.records.holds.transport`: :class:`TransportHold`, the transport's hold (our own
  side refused: credentials, certificate, sender), probed with one mail on a doubling backoff
  and kept until the relay accepts a mail; its script ``lua/transport.lua``
- :mod:`mailer.records.holds.keyed`: :class:`Holds` (what the guard uses) and
  :func:`holds_from_url`, which picks the store by the URL's scheme

>>> from mailer.clock import ManualClock
>>> holds = holds_from_url("memory://", clock=ManualClock(1000.0), max_hold=300)
>>> holds.hold_sender(60, "454 4.7.0 Throttling failure").until
1060.0
>>> holds.hold_sender(60, "454 4.7.0 Throttling failure").until  # again within it: doubled
1120.0
>>> holds.active("ada@example.com")[0].level
1
"""

from mailer.records.holds.base import RECIPIENT, SENDER, Hold, HoldStore, next_hold
from mailer.records.holds.keyed import Holds, holds_from_url
from mailer.records.holds.memory import MemoryHoldStore
from mailer.records.holds.pace import Pace
from mailer.records.holds.redis import RedisHoldStore
from mailer.records.holds.transport import TRANSPORT, TransportHold

__all__ = [
    "RECIPIENT",
    "SENDER",
    "TRANSPORT",
    "Hold",
    "HoldStore",
    "Holds",
    "MemoryHoldStore",
    "Pace",
    "RedisHoldStore",
    "TransportHold",
    "holds_from_url",
    "next_hold",
]
