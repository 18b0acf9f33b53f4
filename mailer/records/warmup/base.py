"""The warm-up record's plain data and store protocol (:mod:`mailer.records.warmup`: the
story)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Taken:
    """What a store answers for one mail of a sender on a plan: ``admitted`` (counted in the
    day's allowance, or counted before: a run again) or not (over the allowance: it waits for
    day ``day + 1``, which starts at :attr:`next_day`; ``position``: its place among the day's
    waiting mails, from 1). ``allowance`` None: past the plan, no limit. Times: epoch
    seconds on the limiter's clock."""

    admitted: bool
    day: int
    allowance: int | None
    used: int
    waiting: int
    start: float
    day_length: float
    position: int = 0

    @property
    def next_day(self) -> float:
        """When the next day of the plan starts (epoch seconds)."""
        return self.start + self.day * self.day_length


@dataclass(frozen=True)
class Standing:
    """A sender's place on its plan now, read without counting: ``day`` 0 and ``started`` 0
    when it never sent (or was idle long enough to start over)."""

    sender: str
    day: int
    allowance: int | None
    used: int
    waiting: int
    started: float
    last: float


class WarmupStore(Protocol):
    """Per sender (``sid``: its short hash), the plan's day, the mails counted and parked that
    day. Each :meth:`take` is one atomic step (one script call on Redis)."""

    def take(
        self,
        sid: str,
        mail: str,
        *,
        now: float,
        allowances: tuple[int, ...],
        day_length: float,
        idle: float,
        force: bool,
    ) -> Taken:
        """Count ``mail`` (its hashed id) in the day's allowance if it fits (or ``force``: a
        transactional kind, counted but never parked), else mark it waiting. A mail counted
        today or yesterday is admitted again without counting (a booked mail's next run). A
        sender whose last mail is ``idle`` seconds old or more starts over on day 1."""
        ...

    def state(self, sid: str) -> tuple[float, float, int, int, int] | None:
        """``(start, last, day, used, waiting)`` as stored (not judged against now); None:
        never counted."""
        ...
