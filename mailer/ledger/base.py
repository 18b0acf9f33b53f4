"""The ledger's protocol and what its answers mean; :mod:`mailer.ledger` tells the whole story."""

from __future__ import annotations

from typing import Protocol

from mailer.defaults import OUTCOME_TTL
from mailer.outcomes import Outcome

#: How long a recorded outcome is kept, in seconds (7 days: longer than any deferral).
SENT_TTL = OUTCOME_TTL

#: What :meth:`Ledger.begin` answers: the recorded outcome, True (claimed) or False (held).
Begun = Outcome | bool


class Ledger(Protocol):
    """Claims and sent-markers per mail id. Every method is one atomic step."""

    def begin(
        self, mail_id: str, owner: str, lease: float, *, takeover: str | None = None
    ) -> Begun:
        """The recorded outcome of ``mail_id`` if it finished; else claim it for ``lease``
        seconds under ``owner`` and answer True; False if another owner holds the claim.

        ``takeover`` names an earlier run of the same mail that ended without knowing whether
        its claim was written (the ledger timed out): a claim held by it is taken over at once
        instead of waiting out its lease. Only that owner: a concurrent copy still waits."""
        ...

    def unclaim(self, mail_id: str, owner: str) -> None:
        """Give the claim back, if ``owner`` still holds it."""
        ...

    def record(self, outcome: Outcome) -> None:
        """Remember ``outcome`` (sent, dropped or failed) as the final one of its mail id and
        drop the claim: every later ``begin`` answers it."""
        ...

    def recorded(self, mail_id: str) -> Outcome | None:
        """The final outcome of ``mail_id``, if one was recorded (for operators and tests)."""
        ...
