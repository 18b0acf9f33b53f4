"""Admission: the limiter's answer for a mail that passed the gates, and what it means.

The kind's ``max_wait`` counts from when the guard first saw the mail, on the limiter's clock
(:meth:`~mailer.guard.booking.Booking.window`; for a copy of a first run, from that first
run: :mod:`mailer.guard.claim`): a mail past that deadline is dropped ``expired``, and no
booking reaches beyond it (one moved back past it is given back and dropped ``late``).

Every run is judged against the slot it holds, the one it was booked *or admitted* for (a
copy of a run that died after its admission holds that admission): a run that starts, by
the limiter's clock, more than ``late_tolerance`` seconds after it is spaced by the policy in
real time. Where the limiter judges lateness (recipient sliding tiers, one recipient) it does
so inside the decision, against the slots actually sent, in the recipient's booked order:
the bookings reached before it go first, the bookings after it move back only as far as the
policy requires (:func:`mailer.limits.sliding_log._judged`); elsewhere the run gives the slot
back and asks again (:meth:`Admission.rebook`). Where the limiter keeps a recipient's booked
order (:mod:`mailer.limits.ordering`), a mail booked takes the slot of a future booking of a
mail sent after it (:meth:`~mailer.guard.booking.Booking.order_of`), which finds its later
slot when its run comes. A limiter that is down defers
(``fail_closed``) or lets the mail go unguarded (``fail_open``); recipients that found no
common slot always defer.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from mailer import outcomes as why
from mailer.durations import human
from mailer.errors import BackendUnavailable, Contended, CorruptState
from mailer.guard.booking import Booking
from mailer.guard.data import Admitted, GuardConfig, Prepared, log_fields
from mailer.guard.outage import backend_down
from mailer.limits.decision import Decision
from mailer.mail.kinds import Kinds
from mailer.metrics import UNKNOWN_KIND, Metrics
from mailer.steps import Finish, Progress, Step

log = logging.getLogger("mailguard")


@dataclass(frozen=True)
class Decided:
    """The limiter's decision for a mail, asked at ``now`` (epoch seconds, the limiter's clock)
    with ``max_wait`` (seconds) as :meth:`Admission.admit` would have; ``seconds``: how long
    the call that carried it took."""

    now: float
    max_wait: float
    decision: Decision
    seconds: float


class Admission:
    """Asks the limiter (with reservations) and plans: send now, wait for the booking, drop."""

    def __init__(
        self, booking: Booking, config: GuardConfig, kinds: Kinds, metrics: Metrics
    ) -> None:
        self.booking = booking
        self.config = config
        self.kinds = kinds
        self.metrics = metrics

    def admit(
        self, mail: Prepared, progress: Progress, decided: Decided | None = None
    ) -> Admitted | Step:
        """:class:`Admitted`, ``Later`` (booked; limiter down) or ``Finish`` (dropped). A copy
        of a first run that ended unfinished (``Progress.first_run_copy``) holds the slot its
        first run was admitted at, if it was: the limiter's entry under its mail id.
        ``decided``: the limiter's answer already given (it rode on the claim's round trip:
        :mod:`mailer.guard.front`), judged here as if asked now."""
        late = False
        try:
            if decided is not None:
                now, max_wait, decision = decided.now, decided.max_wait, decided.decision
                self.metrics.decision(decided.seconds)
            else:
                window = self.booking.window(mail, progress)
                if isinstance(window, Finish):
                    if progress.first_run_copy:  # expired: its first run's admission back
                        self.booking.release(mail)
                    return window
                now, max_wait = window
                started = time.perf_counter()
                order = self.booking.order_of(mail, progress)
                decision = self.booking.acquire(mail, max_wait, order=order)
                self.metrics.decision(time.perf_counter() - started)
            if self._judged(mail):
                late = self._judged_late(mail, progress, decision, now)
            elif decision.allowed and now - decision.at > self.config.late_tolerance:
                late = True
                decision = self.rebook(mail, decision, max_wait, now)
            if decision.booked and decision.at - now > max_wait + self.config.late_tolerance:
                late = True  # moved back past its deadline, behind a late mail booked before it
                self.booking.give_back(mail)
                decision = decision._replace(booked=False)
        except (BackendUnavailable, Contended) as exc:
            return self._unanswered(mail, progress, exc)
        except CorruptState as exc:  # foreign data in a limiter key: no answer until removed
            log.error("mail %s: %s", mail.mail_id, exc, extra=log_fields(mail.base))
            self.metrics.backend_down("limiter")
            return backend_down(self.config, mail.base, progress, exc, why.LIMITER_UNAVAILABLE)
        return self.booking.answer(mail, mail.base, progress, decision, late=late)

    def _judged(self, mail: Prepared) -> bool:
        """Whether the limiter judged this mail's lateness itself (one recipient, a limiter
        that does: :attr:`Booking.judges_lateness`)."""
        return not mail.more_keys and self.booking.judges_lateness

    def _judged_late(
        self, mail: Prepared, progress: Progress, decision: Decision, now: float
    ) -> bool:
        """Whether the limiter judged this run again (sent now, booked again, or no slot in
        time), counted and logged: a run late by more than the tolerance, or one on time whose
        slot it refused (a mail of its recipient sent late since, which ignored this booking:
        it waits its spacing after that one). A run that finds its booking already moved (a
        copy of a run that was booked again, a booking moved back behind a late mail booked
        before it; the answer names no tier) was not judged.

        A copy of a first run (``first_run_copy``), or a first run's retry after a refusal,
        is judged by the limiter against the slot its first run was admitted at, which only
        the limiter knows: booked or refused, it counts as judged (a first run that died
        before its admission left no slot: then it was simply booked); sent now or at its
        slot, it does not (the two are not told apart)."""
        if not progress.due:  # a first run, a copy of one, or its retry after a refusal
            if (progress.first_run_copy or progress.send_failures) and not decision.allowed:
                self._late(mail, decision, None)
                return True
            return False
        late_by = now - progress.due
        if late_by < 0:  # early (its slot is still ahead)
            return False
        if late_by <= self.config.late_tolerance and decision.allowed:
            return False
        if decision.booked and decision.tier is None:
            return False
        self._late(mail, decision, late_by)
        return True

    def _late(self, mail: Prepared, again: Decision, late_by: float | None) -> None:
        """Count and log a late run that the limiter judged again (see :meth:`rebook`);
        ``late_by`` None: a copy of a first run that ended unfinished."""
        self.metrics.rebooked(mail.kind.name if mail.kind.name in self.kinds else UNKNOWN_KIND)
        log.info(
            "mail %s ran %s: %s",
            mail.mail_id,
            "again after its first run ended unfinished"
            if late_by is None
            else f"{human(late_by)} after its slot",
            "sent now" if again.allowed else "booked again" if again.booked else "no slot in time",
            extra=log_fields(mail.base),
        )

    def rebook(self, mail: Prepared, slot: Decision, max_wait: float, now: float) -> Decision:
        """This run is late for its slot: give the slot back and ask the limiter again, now.

        The recipient's log then holds this mail at (about) the time it really leaves, and the
        mails booked after it keep their slots, so two mails that leave are never closer than
        the policy allows, whatever made this one late (an outage, a crash, a backlog).
        """
        self.booking.give_back(mail)
        again = self.booking.acquire(mail, max_wait)
        self.metrics.rebooked(mail.kind.name if mail.kind.name in self.kinds else UNKNOWN_KIND)
        log.info(
            "mail %s ran %s after its slot: %s",
            mail.mail_id,
            human(now - slot.at),
            "sent now" if again.allowed else "booked again" if again.booked else "no slot in time",
            extra=log_fields(mail.base),
        )
        return again

    def _unanswered(
        self, mail: Prepared, progress: Progress, exc: BackendUnavailable | Contended
    ) -> Admitted | Step:
        """No decision: the limiter is down (``fail_closed`` defers, ``fail_open`` sends
        unguarded) or the recipients were contended (deferred: the limiter works, so sending
        would break "never over", whatever ``fail_open`` says)."""
        if isinstance(exc, Contended):
            return backend_down(self.config, mail.base, progress, exc, why.CONTENDED)
        self.metrics.backend_down("limiter")
        if not self.config.fail_open:
            return backend_down(self.config, mail.base, progress, exc, why.LIMITER_UNAVAILABLE)
        log.warning(
            "mail %s: limiter unavailable, sending unguarded (fail_open)",
            mail.mail_id,
            extra=log_fields(mail.base),
        )
        return Admitted(due=None, guarded=False)
