"""A worker's watch on the live policy: at most one ``GET`` of the version a second, a new
version built and logged, a bad one refused (logged loudly) while the last good one stays.

Pure but for the store: the clock is injected (``time.monotonic`` in workers), and what a
version becomes (a new guard) is the caller's ``build``; a ``ValueError`` from it refuses the
version as a bad parse does.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from mailer.clock import Clock
from mailer.errors import BackendUnavailable
from mailer.records.policy.base import LivePolicy
from mailer.records.policy.policies import LivePolicies

T = TypeVar("T")
log = logging.getLogger("mailguard")

#: Seconds between two reads of the version, per process.
CHECK_EVERY = 1.0


class PolicyWatch(Generic[T]):
    """Answers a new build when the version in force changed (at most one read per
    ``every`` seconds of ``clock``); None otherwise. Not thread-safe: call under a lock.

    ``build(live)`` gets the new :class:`LivePolicy`, or None when the stored policy is gone
    (the environment's holds again). :attr:`version` is the version in force here (0: the
    environment's).
    """

    def __init__(
        self,
        policies: LivePolicies,
        build: Callable[[LivePolicy | None], T],
        *,
        clock: Clock = time.monotonic,
        every: float = CHECK_EVERY,
    ) -> None:
        self.policies = policies
        self.version = 0
        self._build = build
        self._clock = clock
        self._every = every
        self._checked = -math.inf
        self._refused = -1
        self._down = False

    def check(self) -> T | None:
        """A build for a new version, or None (not time yet, no change, refused, Redis down)."""
        now = self._clock()
        if now - self._checked < self._every:
            return None
        self._checked = now
        try:
            version = self.policies.version()
            if version in (self.version, self._refused):
                self._down = False
                return None
            live = None if version == 0 else self.policies.get(version)
            if live is None and version != 0:
                raise ValueError("it is not stored")
            built = self._build(live)
        except BackendUnavailable as exc:
            if not self._down:
                log.warning("live policy unreadable (%s): version %d stays", exc, self.version)
            self._down = True
            return None
        except ValueError as exc:
            self._refused = version
            log.error(
                "LIVE POLICY VERSION %d REFUSED, version %d stays in force: %s",
                version,
                self.version,
                exc,
            )
            return None
        self._down = False
        self.version = version
        shown = "the environment's MAILGUARD_POLICY" if live is None else live.describe()
        log.warning("live policy version %d in force: %s", version, shown)
        return built
