"""The one vocabulary of a mail's run, from the limiter's answer to the Celery state.

Every layer speaks these words; this table is where they are written down:

| what happened | ``plan()`` | ``Step`` | ``Outcome`` status / reason | Celery state |
|---|---|---|---|---|
| limiter: allowed | ``Send`` | ``Finish`` | ``sent`` / none | SUCCESS |
| limiter: booked | ``Defer`` | ``Later`` | ``deferred`` / ``booked`` | DEFERRED |
| limiter: refused (too far) | ``Drop`` | ``Finish`` | ``dropped`` / ``rate_limited`` | SUCCESS |
| past the kind's deadline | | ``Finish`` | ``dropped`` / ``expired`` | SUCCESS |
| ran late, next slot too far | ``Drop`` | ``Finish`` | ``dropped`` / ``late`` | SUCCESS |
| bad input | | ``Finish`` | ``dropped`` / ``invalid`` | SUCCESS |
| cancelled (``mailguard cancel``) | | ``Finish`` | ``dropped`` / ``cancelled`` | SUCCESS |
| message that keeps ending its worker | | on receipt | ``dropped`` / ``poison`` | SUCCESS |
| already finished (a repeat) | | ``Finish`` / ``Fail`` | the recorded outcome | as recorded |
| another run holds the claim | | ``Later`` | ``deferred`` / ``in_flight`` | DEFERRED |
| limiter down (fail_closed) | | ``Later`` | ``deferred`` / ``limiter_unavailable`` | DEFERRED |
| ledger down (either mode) | | ``Later`` | ``deferred`` / ``ledger_unavailable`` | DEFERRED |
| SMTP 4xx, timeout, lost link | | ``Later`` | ``deferred`` / ``smtp_transient`` | DEFERRED |
| SMTP 4xx, retries used up | | ``Fail`` | ``failed`` / ``retries_exhausted`` | FAILURE |
| SMTP 5xx | | ``Fail`` | ``failed`` / ``smtp_permanent`` | FAILURE |

- :func:`plan` (pure) turns a :class:`~mailer.limits.decision.Decision` into a :data:`Plan`.
- :class:`~mailer.guard.Guard` answers each run with a :data:`Step`: :class:`Finish` (done,
  sent or dropped), :class:`Fail` (failed for good) or :class:`Later` (run again in
  ``countdown`` seconds, carrying :class:`Progress`).
- ``workers/tasks.py`` carries a step out: return the outcome, raise ``MailFailed``, or set the
  state ``DEFERRED`` and retry with the countdown. :data:`CELERY_STATE` names the state a
  reader sees for each status (the simulator and the demo use the same words).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from mailer.limits.decision import Decision
from mailer.limits.policy import Tier
from mailer.outcomes import Outcome, Status

#: The Celery state a mail of each status is in (``AsyncResult(id).state``).
CELERY_STATE: Mapping[Status, str] = {
    "sent": "SUCCESS",
    "dropped": "SUCCESS",
    "deferred": "DEFERRED",
    "failed": "FAILURE",
}


@dataclass(frozen=True, slots=True)
class Send:
    """Send now: the slot at ``at`` (epoch seconds) is this mail's."""

    status: ClassVar[Literal["sent"]] = "sent"
    at: float


@dataclass(frozen=True, slots=True)
class Defer:
    """Run again in ``countdown`` seconds; the slot at ``due`` (epoch seconds) is booked.

    ``countdown`` is the whole wait, or ``max_countdown`` when the wait is longer: the task then
    wakes early, finds its booking, and defers again (a hop). ``wait`` is the whole wait in
    seconds, ``tier`` the tier that made it wait.
    """

    status: ClassVar[Literal["deferred"]] = "deferred"
    countdown: float
    due: float
    wait: float
    tier: Tier | None


@dataclass(frozen=True, slots=True)
class Drop:
    """Do not send: the earliest slot is ``wait`` seconds away, more than the kind tolerates."""

    status: ClassVar[Literal["dropped"]] = "dropped"
    wait: float
    tier: Tier | None


Plan = Send | Defer | Drop


def plan(decision: Decision, *, max_countdown: float) -> Plan:
    """Allowed sends, booked defers (hopping past ``max_countdown`` seconds), refused drops.

    The countdown has no jitter: the slot is booked, so it will be free at ``due``.
    """
    if decision.allowed:
        return Send(at=decision.at)
    if decision.booked:
        wait = decision.retry_after
        return Defer(
            countdown=min(wait, max_countdown), due=decision.at, wait=wait, tier=decision.tier
        )
    return Drop(wait=decision.retry_after, tier=decision.tier)


_COUNTERS = ("attempts", "send_failures", "limiter_failures", "deferrals")
_TIMES = ("requested_at", "due", "first_due")
_LATEST_TIME = 1e11  # epoch seconds, year 5138: anything later is malformed
_OWNER_CHARS = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Progress:
    """What one run of a mail hands to the next (JSON-ready via ``as_dict``; it travels sealed,
    see :mod:`mailer.mail.seal`).

    ``limiter_failures`` counts runs that found a backend (limiter or ledger) down.
    ``stale_owner`` is the claim owner of a run that ended without knowing whether its claim
    is held (the ledger timed out): the next run may take that claim over at once.
    ``requested_at`` (epoch seconds) is when the mail was asked for (``send_mail.delay``, else
    its first run): its kind's ``max_wait`` counts from there. ``due`` is the slot it holds
    (epoch seconds; 0 for none): a run for the same slot is a hop, not another deferral.
    ``first_due`` is the first slot ever booked for it (lateness is measured against it).
    """

    attempts: int = 0  # SMTP tries so far
    send_failures: int = 0  # runs that ended in a transient send failure
    limiter_failures: int = 0  # runs that found a backend down
    deferrals: int = 0  # bookings (a hop towards the same slot is not one)
    stale_owner: str = ""
    requested_at: float = 0.0
    due: float = 0.0
    first_due: float = 0.0

    def as_dict(self) -> dict[str, int | str | float]:
        fields: dict[str, int | str | float] = {name: getattr(self, name) for name in _COUNTERS}
        fields.update({name: getattr(self, name) for name in _TIMES})
        return fields | {"stale_owner": self.stale_owner}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Progress:
        """The inverse of :meth:`as_dict`; anything malformed starts from zero."""
        if not isinstance(data, Mapping):
            return cls()
        owner = data.get("stale_owner", "")
        if not isinstance(owner, str) or len(owner) > 64 or not set(owner) <= _OWNER_CHARS:
            owner = ""
        try:
            counters = {name: max(int(data.get(name, 0)), 0) for name in _COUNTERS}
            times = {name: float(data.get(name, 0.0)) for name in _TIMES}
        except (TypeError, ValueError, OverflowError):
            return cls()
        requested_at, due, first_due = (
            t if 0 <= t < _LATEST_TIME else 0.0
            for t in times.values()  # NaN too
        )
        return cls(
            **counters,
            stale_owner=owner,
            requested_at=requested_at,
            due=due,
            first_due=first_due,
        )


@dataclass(frozen=True)
class Finish:
    """Done for good: ``outcome.status`` is ``sent`` or ``dropped``."""

    outcome: Outcome


@dataclass(frozen=True)
class Fail:
    """Failed for good (``failed``): a permanent SMTP error or retries exhausted."""

    outcome: Outcome


@dataclass(frozen=True)
class Later:
    """Run this mail again in ``countdown`` seconds with ``progress``; ``outcome`` says why.

    ``eta``, when set, is the same moment as epoch seconds on the limiter's clock (the Redis
    server's time): publish at that time rather than ``countdown`` from the worker's own clock,
    so a worker whose clock is off does not make the mails it defers late on the others.
    """

    countdown: float
    outcome: Outcome
    progress: Progress
    eta: float | None = None


Step = Finish | Fail | Later
