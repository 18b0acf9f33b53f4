"""Turn a limiter :class:`~mailer.decision.Decision` into what to do: send, defer or drop. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from mailer.decision import Decision
from mailer.policy import Tier


@dataclass(frozen=True, slots=True)
class Send:
    """Send now: the slot at ``at`` (epoch seconds) is this mail's."""

    at: float


@dataclass(frozen=True, slots=True)
class Defer:
    """Run again in ``countdown`` seconds; the slot at ``due`` (epoch seconds) is booked.

    ``countdown`` is the whole wait, or ``max_countdown`` when the wait is longer (``hop``):
    the task then wakes early, finds its booking, and defers again. ``wait`` is the whole wait
    in seconds, ``tier`` the tier that made it wait.
    """

    countdown: float
    due: float
    wait: float
    tier: Tier | None
    hop: bool


@dataclass(frozen=True, slots=True)
class Drop:
    """Do not send: the earliest slot is ``wait`` seconds away, more than the kind tolerates."""

    reason: str
    wait: float
    tier: Tier | None


Step = Send | Defer | Drop


def plan(decision: Decision, *, max_countdown: float) -> Step:
    """Decide: allowed sends, booked defers (hopping past ``max_countdown`` seconds), refused drops.

    The countdown has no jitter: the slot is booked, so it will be free at ``due``.
    """
    if decision.allowed:
        return Send(at=decision.at)
    if decision.booked:
        wait = decision.retry_after
        return Defer(
            countdown=min(wait, max_countdown),
            due=decision.at,
            wait=wait,
            tier=decision.tier,
            hop=wait > max_countdown,
        )
    return Drop(reason="rate_limited", wait=decision.retry_after, tier=decision.tier)
