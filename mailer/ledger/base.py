"""The ledger's protocol and what its answers mean; :mod:`mailer.ledger` tells the whole story."""

from __future__ import annotations

from typing import Protocol

from mailer.outcomes import Outcome

#: How long a recorded outcome is kept, in seconds (7 days: longer than any deferral).
SENT_TTL = 7 * 86_400

#: What :meth:`Ledger.begin` answers: the recorded outcome, True (claimed) or False (held).
Begun = Outcome | bool


class Ledger(Protocol):
    """Claims and sent-markers per mail id. Every method is one atomic step."""

    def begin(self, mail_id: str, owner: str, lease: float) -> Begun:
        """The recorded outcome of ``mail_id`` if it was sent; else claim it for ``lease``
        seconds under ``owner`` and answer True; False if another owner holds the claim."""
        ...

    def unclaim(self, mail_id: str, owner: str) -> None:
        """Give the claim back, if ``owner`` still holds it."""
        ...

    def record(self, outcome: Outcome) -> None:
        """Remember ``outcome`` as the final one of its mail id and drop the claim."""
        ...

    def recorded(self, mail_id: str) -> Outcome | None:
        """The final outcome of ``mail_id``, if one was recorded (for operators and tests)."""
        ...
