"""The one vocabulary of a mail's run, from the limiter's answer to the Celery state.

Every layer speaks these words; :data:`VOCABULARY` is where they are written down, one
:class:`Word` a row (what happened, ``plan()``'s answer, the guard's ``Step``, the
``Outcome`` status and reason, the Celery state a reader sees). A repeated run of a finished
mail answers the recorded outcome, in the state it was recorded with.

- :func:`plan` (pure) turns a :class:`~mailer.limits.decision.Decision` into a :data:`Plan`.
- :class:`~mailer.guard.Guard` answers each run with a :data:`Step`: :class:`Finish` (done,
  sent or dropped), :class:`Fail` (failed for good) or :class:`Later` (run again after its
  ``wait``, carrying :class:`Progress`).
- ``workers/tasks.py`` carries a step out: return the outcome, raise ``MailFailed``, or store
  the state :data:`DEFERRED` and retry, capping the wait into Celery's countdown (the only
  cap). :func:`celery_state` names the state a reader sees for each status; the CLI, the demo
  and the simulator use the same words.

Names (the glossary: docs/reference/limiter.md): ``wait`` is the remaining wait in seconds,
``due`` the slot it ends at (epoch seconds, the limiter's clock).

The Celery states are plain strings here (this module never imports Celery): the only place in
``mailer/`` and ``workers/`` where they are written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from mailer import outcomes as why
from mailer.limits.decision import Decision
from mailer.limits.policy import Tier
from mailer.outcomes import Outcome, Status

#: Celery's state of a task it knows nothing of (an unknown id, an expired result, a mail not
#: yet taken by a worker).
PENDING = "PENDING"
#: A mail waiting for its booked slot or its next try; the outcome so far is the state's meta.
DEFERRED = "DEFERRED"
#: The task returned its outcome: ``sent`` or ``dropped``.
SUCCESS = "SUCCESS"
#: The task raised ``MailFailed``: ``failed``.
FAILURE = "FAILURE"
#: The states of a mail that has settled (it will not run again).
FINAL_STATES = frozenset({SUCCESS, FAILURE})


@dataclass(frozen=True, slots=True)
class Word:
    """One row of the vocabulary. ``plan`` is ``plan()``'s answer (empty when the limiter is
    not asked); ``step`` the guard's ``Step`` (``on receipt``: decided before the guard runs)."""

    happened: str
    plan: str
    step: str
    status: Status
    reason: str | None
    state: str


VOCABULARY: tuple[Word, ...] = (
    Word("limiter: allowed", "Send", "Finish", "sent", None, SUCCESS),
    Word("sent, some recipients refused at RCPT", "Send", "Finish", "sent", why.PARTIAL, SUCCESS),
    Word("limiter: booked", "Defer", "Later", "deferred", why.BOOKED, DEFERRED),
    Word("limiter: refused (too far)", "Drop", "Finish", "dropped", why.RATE_LIMITED, SUCCESS),
    Word("past the kind's deadline", "", "Finish", "dropped", why.EXPIRED, SUCCESS),
    Word("ran late, next slot too far", "Drop", "Finish", "dropped", why.LATE, SUCCESS),
    Word("bad input", "", "Finish", "dropped", why.INVALID, SUCCESS),
    Word("cancelled (mailguard cancel)", "", "Finish", "dropped", why.CANCELLED, SUCCESS),
    Word("every recipient suppressed", "", "Finish", "dropped", why.SUPPRESSED, SUCCESS),
    Word("bulk kind, recipient unsubscribed", "", "Finish", "dropped", why.UNSUBSCRIBED, SUCCESS),
    Word("message that keeps ending its worker", "", "on receipt", "dropped", why.POISON, SUCCESS),
    Word("another run holds the claim", "", "Later", "deferred", why.IN_FLIGHT, DEFERRED),
    Word("stale copy (nothing stored)", "", "Finish", "deferred", why.SUPERSEDED, DEFERRED),
    Word("booked after a hold (slow down)", "Defer", "Later", "deferred", why.HELD, DEFERRED),
    Word("recipients found no common slot", "", "Later", "deferred", why.CONTENDED, DEFERRED),
    Word("bulk kind, sender paused", "", "Later", "deferred", why.REPUTATION, DEFERRED),
    Word("warm-up plan: day's allowance used", "", "Later", "deferred", why.WARMUP, DEFERRED),
    Word("limiter down (fail_closed)", "", "Later", "deferred", why.LIMITER_UNAVAILABLE, DEFERRED),
    Word("ledger down (either mode)", "", "Later", "deferred", why.LEDGER_UNAVAILABLE, DEFERRED),
    Word("SMTP 4xx, timeout, lost link", "", "Later", "deferred", why.SMTP_TRANSIENT, DEFERRED),
    Word("SMTP 4xx past the kind's lifetime", "", "Finish", "dropped", why.EXPIRED, SUCCESS),
    Word("SMTP 5xx", "", "Fail", "failed", why.SMTP_PERMANENT, FAILURE),
)

_STATE: Mapping[str, str] = {word.status: word.state for word in VOCABULARY}


def celery_state(status: Status) -> str:
    """The Celery state (``AsyncResult(id).state``) of a mail whose outcome has ``status``."""
    return _STATE[status]


@dataclass(frozen=True, slots=True)
class Send:
    """Send now: the slot at ``at`` (epoch seconds) is this mail's."""

    status: ClassVar[Literal["sent"]] = "sent"
    at: float


@dataclass(frozen=True, slots=True)
class Defer:
    """Run again in ``wait`` seconds, at the booked slot ``due`` (epoch seconds); ``tier`` is
    the tier that made it wait. The whole wait: a worker that holds a shorter countdown wakes
    early, finds its booking, and defers again (a hop)."""

    status: ClassVar[Literal["deferred"]] = "deferred"
    wait: float
    due: float
    tier: Tier | None


@dataclass(frozen=True, slots=True)
class Drop:
    """Do not send: the earliest slot is ``wait`` seconds away, more than the kind tolerates."""

    status: ClassVar[Literal["dropped"]] = "dropped"
    wait: float
    tier: Tier | None


Plan = Send | Defer | Drop
#: The outcome status each :data:`Plan` leads to (``plan()`` never fails a mail): a Plan's
#: ``status``. The simulator's results speak it.
PlanStatus = Literal["sent", "deferred", "dropped"]


def plan(decision: Decision) -> Plan:
    """Allowed sends, booked defers, refused drops.

    The wait has no jitter: the slot is booked, so it will be free at ``due``.
    """
    if decision.allowed:
        return Send(at=decision.at)
    if decision.booked:
        return Defer(wait=decision.wait, due=decision.at, tier=decision.tier)
    return Drop(wait=decision.wait, tier=decision.tier)


_COUNTERS = ("attempts", "send_failures", "limiter_failures", "deferrals", "greylists")
_TIMES = ("requested_at", "due", "first_due", "first_seen")
_LATEST_TIME = 1e11  # epoch seconds, year 5138: anything later is malformed
_OWNER_CHARS = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Progress:
    """What one run of a mail hands to the next (JSON-ready via ``as_dict``; it travels sealed,
    see :mod:`mailer.mail.seal`).

    ``limiter_failures`` counts runs that found a backend (limiter or ledger) down.
    ``stale_owner`` is the claim owner of a run that ended without knowing whether its claim
    is held (the ledger timed out): the next run may take that claim over at once.
    ``requested_at`` (epoch seconds on the caller's clock) is when the mail was asked for
    (``send_mail.delay``): only the queue-wait metric reads it. ``first_seen`` (epoch seconds
    on the limiter's clock, 0 until then) is when the guard first saw the mail, set once by its
    first run that took the claim (the ledger remembers it, so a copy of a first run that died
    gets the first run's): the mail's age, its kind's ``max_wait`` and, once the mail was
    tried (``attempts``), its kind's lifetime count from there. ``due`` is the
    slot it holds (epoch seconds on the limiter's clock; 0 for none): a run for the same slot
    is a hop, not another deferral. ``first_due`` is the first slot ever booked for it
    (lateness is measured against it).
    """

    attempts: int = 0  # SMTP tries so far
    send_failures: int = 0  # runs that ended in a transient send failure (its backoff's step)
    limiter_failures: int = 0  # runs that found a backend down
    deferrals: int = 0  # bookings (a hop towards the same slot is not one)
    stale_owner: str = ""
    requested_at: float = 0.0
    due: float = 0.0
    first_due: float = 0.0
    first_seen: float = 0.0
    #: This run is a copy of a first run that ended unfinished (its worker died; the ledger
    #: remembered an earlier ``first_seen``): it may hold that run's admission. This run's
    #: own knowledge, never carried to the next run (not in :meth:`as_dict`).
    first_run_copy: bool = False
    #: How many runs handed the mail on before this one, and the run that published this one
    #: ("" for a first run): the ledger keeps the latest claiming run's, and a stale copy
    #: (an earlier turn, or a sibling of the same number) ends at its claim
    #: (:class:`~mailer.records.ledger.Turn`). ``turn`` -1: unknown (a progress written
    #: without it), nothing checked.
    turn: int = 0
    parent: str = ""
    #: This run's message was delivered again by the broker (its ``redelivered`` flag): a first
    #: message's copy may find its mail parked (:class:`~mailer.records.ledger.Turn`). This
    #: run's own knowledge, never carried to the next run (not in :meth:`as_dict`).
    redelivered: bool = False
    #: Greylisting replies so far: the step of the greylisting schedule
    #: (:func:`mailer.guard.retry_schedule.greylist_wait`), never a budget.
    greylists: int = 0
    #: When ``send_mail.delay`` was called, epoch microseconds on the caller's clock, strictly
    #: increasing within one producer process (0: unknown): the mail's place in its
    #: recipient's booked order (:mod:`mailer.limits.ordering`). It rides in the message itself
    #: (``_order``), so it is never carried here (not in :meth:`as_dict`).
    order: int = 0

    def as_dict(self) -> dict[str, int | str | float]:
        fields: dict[str, int | str | float] = {name: getattr(self, name) for name in _COUNTERS}
        fields.update({name: getattr(self, name) for name in _TIMES})
        return fields | {"stale_owner": self.stale_owner, "turn": self.turn, "parent": self.parent}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Progress:
        """The inverse of :meth:`as_dict`; anything malformed starts from zero (its turn
        unknown: nothing is checked, so no copy of it is taken for stale)."""
        if not isinstance(data, Mapping):
            return cls(turn=-1)
        owner = data.get("stale_owner", "")
        if not isinstance(owner, str) or len(owner) > 64 or not set(owner) <= _OWNER_CHARS:
            owner = ""
        parent = data.get("parent", "")
        if not isinstance(parent, str) or len(parent) > 64 or not set(parent) <= _OWNER_CHARS:
            parent = ""
        try:
            counters: dict[str, Any] = {name: max(int(data.get(name, 0)), 0) for name in _COUNTERS}
            turn = max(int(data["turn"]), -1) if data.get("turn") is not None else -1
            times = {name: float(data.get(name, 0.0)) for name in _TIMES}
        except (TypeError, ValueError, OverflowError):
            return cls(turn=-1)
        times = {name: t if 0 <= t < _LATEST_TIME else 0.0 for name, t in times.items()}  # NaN
        return cls(
            **counters,
            stale_owner=owner,
            requested_at=times["requested_at"],
            due=times["due"],
            first_due=times["first_due"],
            first_seen=times["first_seen"],
            turn=turn,
            parent=parent,
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
    """Run this mail again in ``wait`` seconds (the whole wait) with ``progress``; ``outcome``
    says why.

    ``due``, when set, is the same moment as epoch seconds on the limiter's clock (the Redis
    server's time; a booked mail's slot): publish for that time rather than ``wait`` from the
    worker's own clock, so a worker whose clock is off does not make the mails it defers late
    on the others. ``workers/tasks.py`` caps the wait into Celery's countdown.
    """

    wait: float
    outcome: Outcome
    progress: Progress
    due: float | None = None


Step = Finish | Fail | Later
