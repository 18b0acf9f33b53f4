"""The guard's round trip before sending: the claim, the gates' reads and, when it is the plain
one, the limiter's decision, in one script call on the ledger's Redis.

Without it a run makes three round trips before it sends: the ledger's ``begin``, one ``MGET``
of the gates' keys (suppression, holds: :func:`~mailer.guard.gates.read_together`) and the
limiter's decision. :class:`Front` makes them one where the parts share one Redis client (the
limiter and the ledger on one URL, not Cluster: :mod:`mailer.factory` gives them one client):

- the gates' keys are read in ``begin``'s one ``MGET`` and their values handed to the gates as
  :func:`~mailer.guard.gates.read_together` would (:meth:`RedisLedger.begin_riding`);
- with a limiter of recipient sliding tiers on that client (:class:`SlidingRedisStore`) and a
  mail of one recipient, the decision :class:`~mailer.guard.admission.Admission` would ask for
  next (the mail's slot within its kind's deadline, late runs judged by the limiter) rides in
  the same script (:mod:`mailer.records.ledger.ride`). The script makes it only when the claim
  was taken by a run that is not a copy of an earlier first run and every gate key was read
  empty: then the gates pass the mail unchanged and the admission would ask exactly that.
  Otherwise nothing is decided and the run goes on as without the ride (one round trip more).

Everything else (the claim's answers, the gates, the admission's judgement of the decision)
is the same code as without the ride: the ride only saves round trips. Anywhere else (memory,
Cluster, separate URLs, several recipients, a scoped policy) the run takes the usual path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from mailer.errors import BackendUnavailable
from mailer.guard.admission import Decided
from mailer.guard.booking import Booking
from mailer.guard.claim import Claim
from mailer.guard.data import Prepared
from mailer.guard.gates import Gate, Reads, shared_reads, split
from mailer.limits.checks import check_max_wait
from mailer.limits.keys import check_key, mail_tag
from mailer.limits.limiter import MAX_WAIT
from mailer.limits.stores.redis import SlidingRedisStore
from mailer.records.ledger import Begun, RedisLedger, Turn
from mailer.records.ledger.ride import Ride
from mailer.steps import Progress, Step


@dataclass(frozen=True)
class Ahead:
    """What a run knows after its first round trip: ``held``, the claim's answer
    (:meth:`Claim.claim`); ``raws``, each gate's values when they were read with it (else None:
    the gates read as usual); ``decided``, the limiter's decision when it rode along."""

    held: Step | Progress
    raws: list[list[Any] | None] | None = None
    decided: Decided | None = None


class Front:
    """One round trip for the claim, the gates' reads and the plain decision, where the parts
    allow it; else the claim alone (:meth:`Claim.claim`)."""

    def __init__(self, claim: Claim, booking: Booking, gates: tuple[Gate, ...]) -> None:
        self.claim = claim
        self.booking = booking
        self.gates = gates

    def begin(self, mail: Prepared, owner: str, progress: Progress, seen: float) -> Ahead:
        """The claim of :meth:`Claim.claim` (same arguments), with what rode on it."""
        ledger = self.claim.ledger
        reads = None
        if isinstance(ledger, RedisLedger) and ledger.reads_together:
            reads = shared_reads(self.gates, mail, ledger.client)
        if reads is None:
            return Ahead(self.claim.claim(mail, owner, progress, seen))
        assert isinstance(ledger, RedisLedger)
        return self._riding(ledger, reads, mail, owner, progress=progress, seen=seen)

    def undo(self, mail: Prepared) -> None:
        """Give back the slot a decision that rode along took, when a gate did not pass the
        mail unchanged after all (not expected: the decision is made with every gate key
        empty)."""
        self.booking.release(mail)

    def _riding(
        self,
        ledger: RedisLedger,
        reads: list[Reads],
        mail: Prepared,
        owner: str,
        *,
        progress: Progress,
        seen: float,
    ) -> Ahead:
        ride, window = self._ride(ledger, mail, progress, seen)
        keys = [key for _, names in reads for key in names]
        got: list[tuple[list[Any], Any, float]] = []

        def begin(
            mail_id: str,
            owner: str,
            lease: float,
            *,
            takeover: str | None,
            first_seen: float | None,
            turn: Turn | None,
        ) -> Begun:
            started = time.perf_counter()
            begun, raws, raw = ledger.begin_riding(
                mail_id,
                owner,
                lease,
                takeover=takeover,
                first_seen=first_seen,
                turn=turn,
                reads=keys,
                ride=ride,
            )
            got.append((raws, raw, time.perf_counter() - started))
            return begun

        held = self.claim.claim_with(begin, mail, owner, progress, seen)
        if not got:  # the ledger was down: the claim's answer says so
            return Ahead(held)
        raws, raw, seconds = got[0]
        decided = None
        if raw is not None and window is not None and isinstance(held, Progress):
            store = self.booking.limiter.store
            assert isinstance(store, SlidingRedisStore)
            decided = Decided(window[0], window[1], store.decision_of(raw), seconds)
        return Ahead(held, split(reads, raws), decided)

    def _ride(
        self, ledger: RedisLedger, mail: Prepared, progress: Progress, seen: float
    ) -> tuple[Ride | None, tuple[float, float] | None]:
        """The decision the admission would ask for this run (its call on the limiter's
        script), and the window it asks in: ``(now, max_wait)``; ``(None, None)`` when it
        cannot ride (another store or client, several recipients, an expired mail)."""
        limiter = self.booking.limiter
        store = limiter.store
        if mail.more_keys or not isinstance(store, SlidingRedisStore):
            return None, None
        # Not either when the engine found the limiter's clock out of reach just now (a first
        # run without ``seen``): not asked again, which would wait another socket timeout.
        if (
            store.client is not ledger.client
            or not limiter.judges_lateness
            or not (progress.first_seen or seen)
        ):
            return None, None
        try:
            now = limiter.now()
        except BackendUnavailable:
            return None, None
        first = replace(progress, first_seen=progress.first_seen or seen)
        max_wait = self.booking.span(mail, first, now)
        late = self.booking.config.late_tolerance
        if max_wait is None or not 0 <= late <= MAX_WAIT:  # else the limiter's call raises
            return None, None
        try:
            key, args = store.late_call(
                check_key(mail.limit_key),
                mail_tag(mail.mail_id),
                check_max_wait(max_wait),
                int(late * 1000),
                self.booking.order_of(mail, progress),
            )
        except ValueError:
            return None, None
        return Ride(store.script, key, args), (now, max_wait)


def asks_the_same(mail: Prepared, passed: object) -> bool:
    """Whether a gate passed ``mail`` on as one the limiter answers the same way (the same
    recipients, kind and tenant: a decision made for ``mail`` stands; a gate that adds headers
    changes nothing the limiter reads)."""
    if passed is mail:
        return True
    if not isinstance(passed, Prepared):
        return False
    return (passed.mail_id, passed.limit_key, passed.more_keys, passed.tenant, passed.kind) == (
        mail.mail_id,
        mail.limit_key,
        mail.more_keys,
        mail.tenant,
        mail.kind,
    )
