"""The suppression list: addresses whose mailbox is gone, not contacted again for a while.

A hard bounce (``550 5.1.1 user unknown``, see :mod:`mailer.mail.replies`) suppresses the recipient
for ``MAILGUARD_SUPPRESS_FOR`` (30 days by default): a later mail to it ends ``dropped`` /
``suppressed`` without contacting the server, since every bounce repeated hurts the sender's
reputation. A bounce or complaint an ESP reports later by webhook suppresses it too
(:mod:`mailer.records.suppression.events`: a complaint for ever, until lifted). Operators add
addresses by hand and lift them (``mailguard suppress / unsuppress / suppressed``). Each entry
says why (its source: SMTP reply, bounce, complaint, rejected, by hand) and since when.

Entries are keyed by a keyed hash of the normalised address (``MAILGUARD_SECRET``), never the
address: ``<namespace>:suppressed:{<hash>}``, a JSON value (since, until, cause, source) that
expires at ``until`` (an entry stored without a source still reads). Memory (one process)
or the ledger's Redis (every worker).

- :mod:`mailer.records.suppression.base`: :class:`Suppression`, the :class:`SuppressionStore`
  protocol
- :mod:`mailer.records.suppression.memory`: :class:`MemorySuppressionStore`, inside one process
- :mod:`mailer.records.suppression.redis`: :class:`RedisSuppressionStore`, one command per
  method (no script)
- :mod:`mailer.records.suppression.suppressions`: :class:`Suppressions` (what the guard and the
  CLI use) and :func:`suppressions_from_url`, which picks the store by the URL's scheme
- :mod:`mailer.records.suppression.events`: :func:`record_event`, a webhook's event into the list

>>> from mailer.clock import ManualClock
>>> store = suppressions_from_url("memory://", clock=ManualClock(1000.0))
>>> store.suppress("Ada@Example.com", seconds=60, cause="550 5.1.1 user unknown").until
1060.0
>>> store.suppressed("ada@example.com").cause
'550 5.1.1 user unknown'
>>> record_event(store, "cy@example.com", "complained").forever
True
"""

from mailer.records.suppression.base import (
    FOREVER,
    SOURCE_WORDS,
    Source,
    Suppression,
    SuppressionStore,
)
from mailer.records.suppression.events import SUPPRESSING, record_event
from mailer.records.suppression.memory import MemorySuppressionStore
from mailer.records.suppression.redis import RedisSuppressionStore
from mailer.records.suppression.suppressions import Suppressions, suppressions_from_url

__all__ = [
    "FOREVER",
    "SOURCE_WORDS",
    "SUPPRESSING",
    "MemorySuppressionStore",
    "RedisSuppressionStore",
    "Source",
    "Suppression",
    "SuppressionStore",
    "Suppressions",
    "record_event",
    "suppressions_from_url",
]
