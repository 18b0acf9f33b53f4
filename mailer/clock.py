"""Clocks: callables returning epoch seconds as a float. Injected, never read behind your back."""

from __future__ import annotations

import time
from collections.abc import Callable

#: A clock: returns the current time in epoch seconds.
Clock = Callable[[], float]


def system_clock() -> float:
    """The machine's wall clock in epoch seconds (``time.time``)."""
    return time.time()


def to_ms(seconds: float) -> int:
    """Epoch seconds to whole epoch milliseconds, rounding down.

    Rounds to the microsecond first, so that float noise (``1.001`` stored as ``1.00099999…``)
    does not lose a millisecond.
    """
    return round(seconds * 1_000_000) // 1000


def to_us(seconds: float) -> int:
    """Epoch seconds to whole epoch microseconds (rounded to the nearest)."""
    return round(seconds * 1_000_000)


class ManualClock:
    """A clock that moves only when told: for tests and simulations.

    >>> clock = ManualClock(1000.0); clock.advance(1.5); clock()
    1001.5
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (never backward)."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self.now += seconds

    def set(self, seconds: float) -> None:
        """Jump to epoch ``seconds``."""
        self.now = seconds
