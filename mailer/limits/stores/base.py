"""The narrow protocol every limiter backend offers: atomic operations over all tiers at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from mailer.limits.sliding_log import RawDecision


class Backend(Protocol):
    """Storage for sliding logs. Keys arrive hashed (see ``keys_as_digest``); tags are 48-bit ints.

    Every method is one atomic step over every tier of the policy the backend was built with.
    Answers are raw tuples (see :mod:`mailer.limits.sliding_log`); :class:`mailer.Limiter`
    turns them into :class:`mailer.Decision`.
    """

    url: str
    #: True: keys arrive as the 12-byte digest (bytes); False: as ``<namespace>:{<hash>}`` text.
    keys_as_digest: bool

    def acquire(
        self, key: Any, tag: int, max_wait_ms: int, not_before_ms: int = 0
    ) -> RawDecision: ...

    def acquire_many(
        self, items: Sequence[tuple[Any, int]], max_wait_ms: int
    ) -> list[RawDecision]: ...

    def peek(self, key: Any) -> RawDecision: ...

    def release(self, key: Any, tag: int) -> bool: ...

    def reset(self, key: Any) -> None: ...

    def close(self) -> None: ...
