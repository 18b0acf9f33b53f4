"""The claim: one atomic ledger ``begin`` on the mail id, so a mail is sent at most once.

Claimed (the run's progress), or what to answer instead: the recorded outcome of a mail that
finished already (a repeat), ``Later`` when another run holds the claim (``in_flight``), or
when the ledger is down (``ledger_unavailable``, whatever the fail mode: without the ledger no
run can promise "once").

A first run (its message carries no ``first_seen``) gives the ledger its ``first_seen`` in the
same ``begin``: the ledger keeps the first one it was given, so a copy of a first run that
died (redelivered after the claim lease) counts its kind's deadline from the first run, not
from itself, and knows it is a copy (``Progress.first_run_copy``: it may hold the first run's
admission, judged like any run's slot).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from mailer import defaults
from mailer import outcomes as why
from mailer.errors import BackendUnavailable
from mailer.guard.data import GuardConfig, Prepared, log_fields
from mailer.guard.outage import backend_down
from mailer.metrics import Metrics
from mailer.outcomes import Outcome
from mailer.records.ledger import Begun, Claimed, Ledger, Superseded, Turn
from mailer.steps import Fail, Finish, Later, Progress, Step

log = logging.getLogger("mailguard")

#: :meth:`Ledger.begin`'s signature: ``(mail_id, owner, lease, *, takeover, first_seen, turn)``.
Begin = Callable[..., Begun]


class Claim:
    """Takes the ledger's claim on a mail id for one run. ``release`` gives a slot back (a
    mail cancelled while it waited)."""

    def __init__(
        self,
        ledger: Ledger,
        config: GuardConfig,
        metrics: Metrics,
        release: Callable[[Prepared], None],
    ) -> None:
        self.ledger = ledger
        self.config = config
        self.metrics = metrics
        self._release = release

    def claim(
        self, mail: Prepared, owner: str, progress: Progress, seen: float = 0.0
    ) -> Step | Progress:
        """:meth:`claim_with` the ledger's own ``begin``."""
        return self.claim_with(self.ledger.begin, mail, owner, progress, seen)

    def claim_with(
        self, begin: Begin, mail: Prepared, owner: str, progress: Progress, seen: float = 0.0
    ) -> Step | Progress:
        """The progress to run with when the run ``owner`` now holds the claim; else the step
        to answer: the recorded outcome of a finished mail (``Finish``, or ``Fail`` for a
        failed one), or ``Later``. A stale owner in ``progress`` (a run that timed out on the
        ledger) is taken over at once. ``seen`` (epoch seconds on the limiter's clock; 0 for
        none): now, for a run whose ``progress`` has no ``first_seen``; the progress then
        carries the first run's ``first_seen`` (``seen`` itself for the first run). ``begin``:
        the ledger's ``begin``, or a call that does more in the same round trip
        (:mod:`mailer.guard.front`)."""
        stale = progress.stale_owner or None
        try:
            begun = begin(
                mail.mail_id,
                owner,
                self.config.claim_lease,
                takeover=stale,
                first_seen=seen or None,
                turn=_turn(progress, stale),
            )
        except BackendUnavailable as exc:
            # The claim may have been written after the client gave up: the next run may take it.
            self.metrics.backend_down("ledger")
            progress = replace(progress, stale_owner=owner)
            return backend_down(self.config, mail.base, progress, exc, why.LEDGER_UNAVAILABLE)
        if isinstance(begun, Outcome):
            log.info(
                "mail %s already %s; nothing sent again",
                mail.mail_id,
                begun.status,
                extra=log_fields(begun),
            )
            if begun.reason == why.CANCELLED:
                self._release(mail)  # cancelled while it waited as a countdown: its slot back
            return Fail(begun) if begun.status == "failed" else Finish(begun)
        if isinstance(begun, Superseded):
            return superseded(mail, progress.turn)
        if isinstance(begun, Claimed):
            first = begun.first_seen
            copy = first != seen  # an earlier first run of this mail claimed it
            return replace(progress, stale_owner="", first_seen=first, first_run_copy=copy)
        if begun:
            return replace(progress, stale_owner="", first_seen=progress.first_seen or seen)
        wait = defaults.IN_FLIGHT_WAIT
        waiting = mail.base.but(status="deferred", reason=why.IN_FLIGHT, wait=wait)
        log.info(
            "mail %s is being sent by another run; checking again later",
            mail.mail_id,
            extra=log_fields(waiting),
        )
        return Later(wait, waiting, progress)


def _turn(progress: Progress, stale: str | None) -> Turn | None:
    """The turn the ledger checks: a first run's too (turn 0: a copy of it that comes after the
    mail moved on is stale, or its next run could replace the live chain's parked entry); none
    for a progress without one (-1), or for a run whose predecessor lost contact with the
    ledger (``stale``: its turn may or may not be kept)."""
    if stale or progress.turn < 0:
        return None
    return Turn(progress.turn, progress.parent, progress.redelivered)


def superseded(mail: Prepared, turn: int) -> Finish:
    """The end of a stale copy of ``turn``: another run of the mail carries it on (it holds
    another turn, or took the claim over). Nothing is sent, recorded or stored, and no next run
    is published; the worker ends it without a trace (:data:`~mailer.outcomes.SUPERSEDED`)."""
    outcome = mail.base.but(status="deferred", reason=why.SUPERSEDED)
    log.info(
        "mail %s: a stale copy (turn %d) ended; another run carries the mail on",
        mail.mail_id,
        turn,
        extra=log_fields(outcome),
    )
    return Finish(outcome)
