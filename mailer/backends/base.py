"""The narrow protocol every limiter backend offers: atomic operations over all tiers at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from mailer.sliding_log import RawDecision


class Backend(Protocol):
    """Storage for sliding logs. Keys arrive already hashed; tags are 48-bit ints (0: none).

    Every method is one atomic step over every tier of the policy the backend was built with.
    Answers are raw tuples (see :mod:`mailer.sliding_log`); :class:`mailer.Limiter` turns them
    into :class:`mailer.Decision`.
    """

    url: str

    def acquire(self, key: str, tag: int, max_wait_ms: int) -> RawDecision: ...

    def acquire_many(
        self, items: Sequence[tuple[str, int]], max_wait_ms: int
    ) -> list[RawDecision]: ...

    def peek(self, key: str) -> RawDecision: ...

    def release(self, key: str, tag: int) -> bool: ...

    def reset(self, key: str) -> None: ...

    def close(self) -> None: ...
