"""Kept failed mails: the payload of a mail that ended ``failed``, kept for a retention so that
``mailguard retry`` can enqueue it again, once.

A run that ends ``failed`` (a permanent refusal that is not a hard bounce, a fault of the
sender's configuration) keeps its payload here (:meth:`FailedStore.keep`, opaque to this
package: ``workers/`` encodes it as the schedule's parked payloads are encoded). A retry
*takes* it (:meth:`FailedStore.take`): in one atomic step the payload goes and a marker names
the mail id it was retried as, so two retries of one mail (run twice, or on two hosts at once)
hand the payload to one caller only, and a mail retried once is never kept again. Both the
payload and the marker last the retention (``MAILGUARD_FAILED_RETENTION``).

- :mod:`mailer.records.failed.base`: the :class:`FailedStore` protocol
- :mod:`mailer.records.failed.memory`: :class:`MemoryFailedStore`, inside one process, on a clock
- :mod:`mailer.records.failed.redis`: :class:`RedisFailedStore`, in the ledger's Redis
- :func:`failed_from_url`: the one that fits a URL's scheme

>>> from mailer.clock import ManualClock
>>> store = failed_from_url("memory://", clock=ManualClock(1000.0))
>>> store.keep("m1", b"payload", failed_at=1000.0, retention=60.0)
True
>>> store.take("m1", retried_as="m1.retry1", retention=60.0), store.take("m1", "m1.retry1", 60.0)
(b'payload', None)
>>> store.retried_as("m1")
'm1.retry1'
"""

from __future__ import annotations

from typing import Any

from mailer.clock import Clock
from mailer.records.failed.base import FailedStore
from mailer.records.failed.memory import MemoryFailedStore
from mailer.records.failed.redis import RedisFailedStore
from mailer.storage import client_from_url, is_memory


def failed_from_url(
    url: str, *, client: Any = None, clock: Clock | None = None, namespace: str = "mailguard"
) -> FailedStore:
    """The kept failed mails on ``memory://`` (on ``clock``) or a Redis URL (the ledger's);
    ``client`` reuses a redis-py client."""
    if is_memory(url):
        return MemoryFailedStore(clock)
    client = client if client is not None else client_from_url(url)
    return RedisFailedStore(client, url, namespace=namespace)


__all__ = ["FailedStore", "MemoryFailedStore", "RedisFailedStore", "failed_from_url"]
