"""The warm-up plans as the guard, the CLI and the gauges use them: senders by address (or their
domain's plan), mail ids and senders hashed, the limiter's clock, the day's length and the idle
span over a :class:`~mailer.records.warmup.base.WarmupStore`; :func:`warmup_from_url` picks the
store by the URL's scheme."""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Mapping
from typing import Any

from mailer import defaults
from mailer.clock import Clock, system_clock
from mailer.records.reputation.base import sender_of
from mailer.records.warmup.base import Standing, Taken
from mailer.records.warmup.memory import MemoryWarmupStore
from mailer.records.warmup.plans import Plan, plan_for
from mailer.records.warmup.redis import RedisWarmupStore
from mailer.storage import client_from_url, is_memory

#: A day of a plan, in seconds.
DAY = 86_400.0


class Warmup:
    """Count a mail against its sender's plan, read where each sender stands. Thread-safe.
    Raises :class:`~mailer.errors.BackendUnavailable` when the store's Redis is down."""

    def __init__(
        self,
        store: Any,
        plans: Mapping[str, Plan],
        *,
        clock: Clock | None = None,
        day_length: float = DAY,
        idle: float = defaults.WARMUP_IDLE,
    ) -> None:
        self.store = store
        self.plans = dict(plans)
        self._clock = clock or system_clock
        self.day_length = day_length  # s: one day of a plan (a test may shorten it)
        self.idle = idle  # s without a mail after which a sender starts over on day 1

    @property
    def client(self) -> Any:
        """The redis-py client of the store; None in memory."""
        return self.store.client if isinstance(self.store, RedisWarmupStore) else None

    def now(self) -> float:
        """Now on the clock the plans count on (the limiter's), epoch seconds."""
        return self._clock()

    def plan_of(self, sender: str) -> tuple[str, Plan] | None:
        """The plan ``sender`` (an address or ``Name <address>``) sends on and whom it counts
        for (the address, or its domain); None: not on a plan."""
        return plan_for(self.plans, sender_of(sender))

    def take(self, sender: str, mail_id: str, *, force: bool = False) -> Taken | None:
        """Count one mail of ``sender`` (by its mail id: a run again is not counted twice);
        ``force``: a transactional kind, counted but never made to wait. None: no plan."""
        found = self.plan_of(sender)
        if found is None:
            return None
        key, plan = found
        taken: Taken = self.store.take(
            sid_of(key),
            mail_of(mail_id),
            now=self._clock(),
            allowances=plan.allowances,
            day_length=self.day_length,
            idle=self.idle,
            force=force,
        )
        return taken

    def standing(self, key: str) -> Standing:
        """Where the plan's sender ``key`` (an address or a domain, as in the plans) stands now:
        the day it is on (0: not started, or idle long enough to start over), the day's
        allowance, mails counted and waiting that day."""
        plan = self.plans[key]
        now = self._clock()
        state = self.store.state(sid_of(key))
        if state is None or now - state[1] >= self.idle:
            return Standing(key, 0, plan.allowance(1), 0, 0, 0.0, 0.0)
        start, last, day, used, waiting = state
        today = max(math.floor((now - start) / self.day_length) + 1, day)
        if today != day:
            used, waiting = 0, 0
        return Standing(key, today, plan.allowance(today), used, waiting, start, last)

    def standings(self) -> list[Standing]:
        """Every plan's sender, sorted."""
        return [self.standing(key) for key in sorted(self.plans)]


def sid_of(key: str) -> str:
    """A sender's (or domain's) short hash in storage keys (16 hex characters)."""
    return hashlib.blake2b(b"warmup:" + key.encode(), digest_size=8).hexdigest()


def mail_of(mail_id: str) -> str:
    """A mail id's short hash as stored (12 characters)."""
    digest = hashlib.blake2b(mail_id.encode("utf-8", "surrogatepass"), digest_size=9).digest()
    return base64.urlsafe_b64encode(digest).decode()


def warmup_from_url(
    url: str,
    plans: Mapping[str, Plan],
    *,
    clock: Clock | None = None,
    client: Any = None,
    namespace: str = "mailguard",
    day_length: float = DAY,
    idle: float = defaults.WARMUP_IDLE,
) -> Warmup:
    """The warm-up on ``memory://`` or a Redis URL (the limiter's); ``client`` reuses a
    redis-py client. Times are ``clock``'s (the limiter's: epoch seconds) on both."""
    store: Any
    if is_memory(url):
        store = MemoryWarmupStore()
    else:
        store = RedisWarmupStore(
            client if client is not None else client_from_url(url), url, namespace
        )
    return Warmup(store, plans, clock=clock, day_length=day_length, idle=idle)
