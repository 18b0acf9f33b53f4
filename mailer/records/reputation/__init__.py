"""Sender reputation: per sender, over a rolling window, the mails sent, hard bounces and spam
complaints, and a **pause** of the sender's bulk kinds when a rate crosses its threshold.

Mailbox providers judge a sender by its rates (Gmail and Yahoo want complaints under 0.3 %,
Gmail better under 0.1 %; Amazon SES reviews an account at 5 % bounces). With
``MAILGUARD_REPUTATION="complaint 0.3%, bounce 5%"`` (``on``, or a setting without a complaint
rate, takes the providers' 0.3 %) every mail sent counts for its sender (the From address),
every hard bounce (an SMTP reply, a webhook's ``bounced``) and complaint (a webhook's
``complained``) against it; with at least ``MAILGUARD_REPUTATION_MIN`` mails sent in
``MAILGUARD_REPUTATION_WINDOW``, a rate at or over its threshold pauses the sender's bulk kinds
(``MAILGUARD_KIND_<NAME>_UNSUBSCRIBE=1``): their mails wait (``deferred`` / ``reputation``),
other kinds still go. Before that, a complaint that leaves the rate at or over 0.1 % logs a
WARNING (:attr:`Limits.warning`). The pause lifts by itself when every rate falls back under its
threshold (more mails sent, old events out of the window), or by hand (``mailguard reputation
resume``, which forgives the window's events).

Counters live in buckets (the window over 24), a bounded number of keys per sender; a webhook's
event is attributed to its mail's sender through the mail's Message-ID, marked at send for the
window. Memory (one process) or the ledger's Redis (every worker).

- :mod:`mailer.records.reputation.base`: :class:`Thresholds`, :class:`Limits`,
  :class:`Standing`, :class:`Pause`, the :class:`ReputationStore` protocol
- :mod:`mailer.records.reputation.memory`, :mod:`mailer.records.reputation.redis` (its script
  ``lua/count.lua``): the stores
- :mod:`mailer.records.reputation.keyed`: :class:`Reputation` (what the guard, webhooks
  and the CLI use) and :func:`reputation_from_url`

>>> from mailer.clock import ManualClock
>>> limits = Limits(Thresholds.parse("complaint 10%"), window=86400.0, minimum=2)
>>> reputation = reputation_from_url("memory://", limits, clock=ManualClock(1000.0))
>>> _ = [reputation.count_sent("news@example.org", "newsletter", f"<m{n}@x>") for n in (1, 2)]
>>> reputation.count_event("complained", "<m1@x>").standing.paused
True
"""

from mailer.records.reputation.base import Limits, Pause, Standing, Thresholds, percent, sender_of
from mailer.records.reputation.keyed import Reputation, reputation_from_url

__all__ = [
    "Limits",
    "Pause",
    "Reputation",
    "Standing",
    "Thresholds",
    "percent",
    "reputation_from_url",
    "sender_of",
]
