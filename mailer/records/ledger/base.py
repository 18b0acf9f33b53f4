"""The ledger's protocol and what its answers mean (:mod:`mailer.records.ledger`: the story)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from mailer.defaults import OUTCOME_TTL
from mailer.outcomes import Outcome

#: How long a recorded outcome is kept, in seconds (7 days: longer than any deferral).
SENT_TTL = OUTCOME_TTL

#: How long a mail's hand-off count is kept, in seconds (a day: redeliveries come far sooner).
RUNS_TTL = 86_400
#: How many dead letters are kept (the oldest are forgotten first).
MAX_DEAD_LETTERS = 10_000

#: How long the first run's ``first_seen`` is remembered for its copies, in seconds (a day:
#: a redelivered copy of a first run comes within the claim lease and the broker's visibility
#: timeout; every later run carries ``first_seen`` in its own progress).
FIRST_SEEN_TTL = 86_400

#: How long a mail's turn is kept, in seconds (a day). A turn forgotten earlier (a mail
#: waiting longer) checks nothing: every copy may then run, and the claim still keeps a copy
#: from sending twice.
TURN_TTL = 86_400


@dataclass(frozen=True)
class Claimed:
    """Claimed (:meth:`Ledger.begin` with ``first_seen``): and when the guard first saw the
    mail, as the first run that claimed it remembered it (epoch seconds, the limiter's clock).
    Earlier than the ``first_seen`` given: this run is a copy of a first run that ended
    unfinished (its worker died), and the kind's deadline counts from that first run."""

    first_seen: float


@dataclass(frozen=True)
class Turn:
    """A run's place in its mail's chain of runs: ``number`` runs handed it on before this one
    (0 for a first run), ``parent`` names the run that published this one ("" for a first
    run). A copy of a message (a redelivery, the watchdog's) carries the same turn.

    ``copy``: the broker delivered this message again (its ``redelivered`` flag). Only such a
    first message (turn 0) can find its mail parked by its first run, whose claim (and
    ``first_seen``) went with the parking: the ledger then looks for the mail in the schedule
    (one ``HEXISTS``), and a first delivery pays nothing."""

    number: int
    parent: str = ""
    copy: bool = False


@dataclass(frozen=True)
class Superseded:
    """:meth:`Ledger.begin` of a stale copy: a run of a later turn (``number``), or another
    child of the same run, began first: that chain carries the mail on. The stale copy must
    end without a trace: no send, no state, no next run."""

    number: int


#: What :meth:`Ledger.begin` answers: the recorded outcome, True or :class:`Claimed` (claimed),
#: False (held), or :class:`Superseded` (a stale copy).
Begun = Outcome | bool | Claimed | Superseded


class Ledger(Protocol):
    """Claims and sent-markers per mail id. Every method is one atomic step."""

    def begin(
        self,
        mail_id: str,
        owner: str,
        lease: float,
        *,
        takeover: str | None = None,
        first_seen: float | None = None,
        turn: Turn | None = None,
    ) -> Begun:
        """The recorded outcome of ``mail_id`` if it finished; else claim it for ``lease``
        seconds under ``owner`` and answer True; False if another owner holds the claim.

        ``turn`` (None: unknown, nothing checked): the ledger keeps the turn of the latest run
        that claimed the mail (for :data:`TURN_TTL`). A run of an earlier turn, or of the same
        number with another parent (a sibling chain: two copies of one run both handed the
        mail on), is a stale copy: :class:`Superseded`, nothing changes. A copy of the very
        message that claimed (same number, same parent) claims as usual: the run it copies may
        have died. Checked after the outcome (a finished mail answers it to every copy).

        ``first_seen`` (epoch seconds; a first run's, whose message carries none): with the
        claim taken, the ledger remembers it for the mail unless it remembers one already
        (for :data:`FIRST_SEEN_TTL`, until its outcome is recorded), and answers
        :class:`Claimed` with the one it remembers, in the same atomic step.

        ``takeover`` names an earlier run of the same mail that ended without knowing whether
        its claim was written (the ledger timed out): a claim held by it is taken over at once
        instead of waiting out its lease. Only that owner: a concurrent copy still waits."""
        ...

    def unclaim(self, mail_id: str, owner: str) -> None:
        """Give the claim back, if ``owner`` still holds it."""
        ...

    def record(self, outcome: Outcome) -> None:
        """Remember ``outcome`` (sent, dropped or failed) as the final one of its mail id and
        drop the claim and the turn: every later ``begin`` answers it."""
        ...

    def parked(self, mail_id: str) -> bool:
        """``mail_id`` is parked in the schedule by the run that gave its claim back: drop what
        the ledger keeps of it that the parked payload carries (the first run's ``first_seen``
        with the given-back claim), where a late copy of its first message is still known
        stale without it. True when something was dropped."""
        ...

    def recognise_parked(
        self, payloads_key: str, field: Callable[[str], str | bytes] = str
    ) -> bool:
        """Have ``begin`` end a late first message whose mail is parked under ``payloads_key``
        (``field(mail_id)`` its field there): True when this ledger can read that key in its
        own calls (a Redis ledger beside the schedule), False and nothing changed otherwise."""
        ...

    def handoff(self, mail_id: str) -> int:
        """Count one more hand-off of a *redelivered* copy of ``mail_id`` to a pool, in one
        atomic step: the count so far, or 0 when the mail finished or a run holds its claim.

        Every run that ends (``unclaim``, ``record``) resets the count, so it only grows while
        copies keep dying before any run ends: a poison message. The caller decides the limit.
        """
        ...

    def quarantine(self, outcome: Outcome) -> None:
        """Record ``outcome`` (``dropped`` / ``poison``) as final and keep it in the dead-letter
        list (the newest :data:`MAX_DEAD_LETTERS`)."""
        ...

    def dead_letters(self, limit: int = 100) -> list[Outcome]:
        """The newest quarantined outcomes, newest first (for operators)."""
        ...

    def recorded(self, mail_id: str) -> Outcome | None:
        """The final outcome of ``mail_id``, if one was recorded (for operators and tests)."""
        ...
