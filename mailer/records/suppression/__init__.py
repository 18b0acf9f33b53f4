"""The suppression list: addresses whose mailbox is gone, not contacted again for a while.

A hard bounce (``550 5.1.1 user unknown``, see :mod:`mailer.mail.replies`) suppresses the recipient
for ``MAILGUARD_SUPPRESS_FOR`` (30 days by default): a later mail to it ends ``dropped`` /
``suppressed`` without contacting the server, since every bounce repeated hurts the sender's
reputation. Operators add addresses by hand (a complaint, an ESP's bounce webhook) and lift
them (``mailguard suppress / unsuppress / suppressed``).

Entries are keyed by a keyed hash of the normalised address (``MAILGUARD_SECRET``), never the
address: ``<namespace>:suppressed:{<hash>}``, a JSON value (since, until, cause) that expires
at ``until``. Memory (one process) or the ledger's Redis (every worker).

- :mod:`mailer.records.suppression.base`: :class:`Suppression`, the :class:`SuppressionStore`
  protocol
- :mod:`mailer.records.suppression.memory`: :class:`MemorySuppressionStore`, inside one process
- :mod:`mailer.records.suppression.redis`: :class:`RedisSuppressionStore`, one command per
  method (no script)
- :mod:`mailer.records.suppression.suppressions`: :class:`Suppressions` (what the guard and the
  CLI use) and :func:`suppressions_from_url`, which picks the store by the URL's scheme

>>> from mailer.clock import ManualClock
>>> store = suppressions_from_url("memory://", clock=ManualClock(1000.0))
>>> store.suppress("Ada@Example.com", seconds=60, cause="550 5.1.1 user unknown").until
1060.0
>>> store.suppressed("ada@example.com").cause
'550 5.1.1 user unknown'
"""

from mailer.records.suppression.base import Suppression, SuppressionStore
from mailer.records.suppression.memory import MemorySuppressionStore
from mailer.records.suppression.redis import RedisSuppressionStore
from mailer.records.suppression.suppressions import Suppressions, suppressions_from_url

__all__ = [
    "MemorySuppressionStore",
    "RedisSuppressionStore",
    "Suppression",
    "SuppressionStore",
    "Suppressions",
    "suppressions_from_url",
]
