"""The ledger: who is sending a mail right now (a claim with a lease), and which mails were sent.

It is what makes one ``send_mail`` call send at most one mail although the broker may hand the
same task out twice (a Redis ``visibility_timeout`` shorter than a countdown, a worker that died
after sending, before acknowledging). A run first calls :meth:`Ledger.begin`, which in one atomic
step returns the recorded outcome if the mail was already sent, or else takes a claim on the
mail id (``SET NX`` with a lease), or reports that another run holds it. After sending, the run
records the outcome under the mail id, which also drops its claim.

Caveat: a worker that dies after the server accepted the mail but before the outcome was recorded
leaves the claim to expire; the copy that then runs sends again. SMTP gives no way to ask whether
a mail was accepted, so this window (milliseconds) is the at-least-once part of the design.

Shaped like the limiter's storage (:mod:`mailer.limits.stores`):

- :mod:`mailer.records.ledger.base`: the :class:`Ledger` protocol, :data:`Begun`, :data:`SENT_TTL`
- :mod:`mailer.records.ledger.memory`: :class:`MemoryLedger`, inside one process
- :mod:`mailer.records.ledger.redis`: :class:`RedisLedger`, one round trip per method; its scripts
  are package files, ``lua/begin.lua``, ``lua/unclaim.lua``, ``lua/record.lua`` and
  ``lua/handoff.lua``, each opening with the keys and arguments it takes
- :mod:`mailer.records.ledger.ride`: ``begin`` with a limiter's decision riding on it (the
  guard's one round trip before sending: :mod:`mailer.guard.front`)
- :func:`ledger_from_url`: the one that fits a URL's scheme
"""

from __future__ import annotations

from typing import Any

from mailer.clock import Clock
from mailer.records.ledger.base import SENT_TTL, Begun, Claimed, Ledger, Superseded, Turn
from mailer.records.ledger.memory import MemoryLedger
from mailer.records.ledger.redis import RedisLedger
from mailer.storage import client_from_url, is_memory


def ledger_from_url(
    url: str, *, client: Any = None, clock: Clock | None = None, namespace: str = "mailguard"
) -> Ledger:
    """The ledger on ``memory://`` (on ``clock``) or a Redis URL (Redis's own clock);
    ``client`` reuses a redis-py client."""
    if is_memory(url):
        return MemoryLedger(clock)
    return RedisLedger(client if client is not None else client_from_url(url), url, namespace)


__all__ = [
    "SENT_TTL",
    "Begun",
    "Claimed",
    "Ledger",
    "MemoryLedger",
    "RedisLedger",
    "Superseded",
    "Turn",
    "ledger_from_url",
]
