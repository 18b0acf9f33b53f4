"""The Redis server's clock as this process can read it cheaply: :class:`ServerClock`.

The limiter decides on the server's ``TIME`` (one clock for every worker). A guard that must
compare a deadline or a slot with that clock reads it here: ``TIME`` once, then carried forward
on this process's monotonic clock (which no wall-clock step or skew moves), read again every
:data:`REFRESH` seconds. Between two reads the estimate is off by at most half the round trip
of the last read plus the two clocks' drift (100 ppm, a bad quartz, is 1 ms in 10 s).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from mailer.errors import BackendUnavailable
from mailer.storage import redis_down_as_unavailable

#: Seconds between two ``TIME`` reads of one process.
REFRESH = 10.0


class ServerClock:
    """Epoch seconds on the server's clock; ``read`` returns them in one round trip.

    Raises :class:`BackendUnavailable` only when the server has never been read; a failed
    refresh keeps the last reading (tried again after ``refresh`` seconds). Thread-safe.
    """

    def __init__(
        self,
        read: Callable[[], float],
        *,
        refresh: float = REFRESH,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._refresh = refresh
        self._monotonic = monotonic
        #: (server epoch seconds, monotonic seconds at that moment, monotonic of the next read)
        self._sync: tuple[float, float, float] | None = None
        self._lock = threading.Lock()

    def __call__(self) -> float:
        sync = self._sync
        if sync is None or self._monotonic() >= sync[2]:
            sync = self.sync()
        return sync[0] + (self._monotonic() - sync[1])

    def sync(self) -> tuple[float, float, float]:
        """Read the server's clock now (at the midpoint of the round trip); the new reading,
        or the last one when the server cannot be reached."""
        with self._lock:
            before = self._monotonic()
            try:
                server = self._read()
            except BackendUnavailable:
                if self._sync is None:
                    raise
                server_then, mono_then, _ = self._sync
                self._sync = (server_then, mono_then, before + self._refresh)
                return self._sync
            after = self._monotonic()
            self._sync = (server, (before + after) / 2, after + self._refresh)
            return self._sync


def redis_clock(client: Any, url: str) -> ServerClock:
    """The :class:`ServerClock` of the Redis behind ``client`` (``TIME``; on a Cluster, one
    node's); ``url`` names it in a :class:`BackendUnavailable`."""

    def read() -> float:
        with redis_down_as_unavailable(url):
            seconds, micros = client.time()
        return int(seconds) + int(micros) / 1_000_000

    return ServerClock(read)
