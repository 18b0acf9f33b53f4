"""Booking with a deadline: the limiter's slot for one mail, within what its kind still allows.

:class:`Booking` is the one place that

- computes the deadline (the kind's ``max_wait``, in seconds, counts from when the guard first
  saw the mail: ``Progress.first_seen``; once the relay was tried, the kind's lifetime:
  :func:`~mailer.guard.retry_schedule.kept_for`) and drops an expired mail (:meth:`Booking.window`),
  both on the limiter's clock (:meth:`~mailer.limits.limiter.Limiter.now`), so no worker's or
  caller's clock moves a deadline;
- asks the limiter for a mail: its one recipient, or every envelope recipient at one common
  slot (:mod:`mailer.limits.multi`), with the mail's tenant and kind share; gives a slot back;
- turns a decision into what to do (:meth:`Booking.answer`, through
  :func:`~mailer.steps.plan`): :class:`~mailer.guard.data.Admitted` (send now), ``Later``
  (booked; a hop towards a far slot is not a new deferral) or ``Finish`` (``dropped``).

Admission (:mod:`mailer.guard.admission`) and the holds gate (:meth:`Booking.after_hold`) both
book through it. It decides nothing about outages beyond the hold booking's own rule: the
caller says what a limiter that is down means.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from typing import Any

from mailer import outcomes as why
from mailer.clock import Clock
from mailer.durations import human
from mailer.errors import BackendUnavailable, Contended
from mailer.guard.data import Admitted, GuardConfig, Prepared, iso, log_fields
from mailer.guard.outage import backend_down
from mailer.guard.retry_schedule import kept_for
from mailer.limits.decision import Decision, backlog_detail, backlog_full
from mailer.limits.limiter import MAX_WAIT, Limiter
from mailer.limits.multi import acquire_all, release_all
from mailer.limits.ordering import order_key
from mailer.metrics import Metrics
from mailer.outcomes import Outcome
from mailer.records.holds import Hold
from mailer.steps import Defer, Drop, Finish, Later, Progress, Send, Step, plan

log = logging.getLogger("mailguard")


#: The scope of an :class:`After` that waits out a greylisting delay (this mail alone).
GREYLISTING = "greylisting"
#: The scope of an :class:`After` that waits for its slot in the sender's pace after a hold
#: (:mod:`mailer.records.holds.pace`).
PACE = "pace"
#: How far before its deadline a mail is booked when a guessed hold outlasts the deadline,
#: in seconds (at most half the wait left): room for the limiter to find the slot in time.
LATEST_MARGIN = 0.5


@dataclass(frozen=True)
class After:
    """A hold to wait out: the mail is booked at the earliest slot at or after ``hold`` ends.
    ``scope`` is ``sender``, ``recipient`` or ``greylisting`` (this mail's own delay)."""

    scope: str
    hold: Hold

    def fields(self, base: Outcome) -> dict[str, Any]:
        """The outcome fields of a mail booked or dropped because of this hold, the same for
        every such mail (the one whose reply started it and those that met it): ``hold``, and
        ``smtp_code`` / ``smtp_reply`` of the reply that started it (:func:`reply_of`)."""
        code, reply = reply_of(self.hold.cause)
        return {"hold": self.scope, "smtp_code": code, "smtp_reply": reply}

    def held_until(self) -> str:
        if self.scope == GREYLISTING:
            return f"greylisted until {iso(self.hold.until)}"
        if self.scope == PACE:
            return f"sender paced until {iso(self.hold.until)}"
        return f"{self.scope} held until {iso(self.hold.until)}"

    def tier(self) -> str:
        """The ``tier`` of a mail booked or dropped because of this hold."""
        if self.scope == PACE:
            return "sender pace"
        return GREYLISTING if self.scope == GREYLISTING else f"{self.scope} hold"

    def end(self, now: float, max_wait: float) -> float:
        """When the mail may go (epoch seconds): the hold's end; for a guessed hold (no delay
        stated by the server) that ends past the mail's deadline (``now + max_wait``), its
        latest slot instead: the deadline less :data:`LATEST_MARGIN` (a stated hold past the
        deadline drops the mail)."""
        latest = now + max_wait - min(LATEST_MARGIN, max_wait / 2)
        if self.hold.stated or self.hold.until <= latest:
            return self.hold.until
        return latest


_REPLY_RE = re.compile(r"^(?P<code>[2-5][0-9]{2})(?:\s+(?P<text>.*))?$", re.DOTALL)
#: How a hold started by evidence names the reply that tipped it (see the holds gate).
_LAST_WITH = "the last with "


def reply_of(cause: str) -> tuple[int | None, str | None]:
    """The SMTP code and reply text of the reply that started a hold, from its ``cause``:
    ``"454 4.7.0 Try later"`` gives ``(454, "4.7.0 Try later")``; a hold started by evidence
    (``"3 recipients failed within 10s, the last with 451 4.3.0 ..."``) gives its last reply.
    A cause with no code gives ``(None, cause)``."""
    text = cause.rsplit(_LAST_WITH, 1)[-1].strip()
    match = _REPLY_RE.match(text)
    if match is None:
        return None, cause or None
    return int(match["code"]), match["text"] or None


class Booking:
    """A mail's slot from the limiter within its kind's deadline. Thread-safe if the limiter is."""

    def __init__(
        self,
        limiter: Limiter,
        config: GuardConfig,
        clock: Clock,
        metrics: Metrics,
    ) -> None:
        self.limiter = limiter
        self.config = config
        self._clock = clock
        self._metrics = metrics

    def recipient_key(self, limit_key: str) -> str:
        """The hashed storage key of a recipient (safe to log and to show in outcomes)."""
        return self.limiter.storage_key("recipient", limit_key)

    def stamp(self) -> float:
        """Epoch seconds on the limiter's clock, else (its server never reached) this worker's:
        for an outcome's times (``sent_at`` is compared with ``due``). Never raises."""
        try:
            return self.limiter.now()
        except BackendUnavailable:
            return self._clock()

    def window(self, mail: Prepared, progress: Progress) -> tuple[float, float] | Finish:
        """Now on the limiter's clock, and the longest wait in seconds the kind still allows
        (capped at the limiter's ``MAX_WAIT``); ``dropped`` / ``expired`` more than
        ``late_tolerance`` past it. A mail not yet seen counts from now. Raises
        ``BackendUnavailable`` when the limiter's server was never reached."""
        now = self.limiter.now()
        left = self.span(mail, progress, now)
        if left is None:
            return self._expired(mail, progress, now)
        return now, left

    def span(self, mail: Prepared, progress: Progress, now: float) -> float | None:
        """:meth:`window`'s longest wait at ``now`` (epoch seconds, the limiter's clock); None
        for a mail expired then (nothing done about it)."""
        left = (progress.first_seen or now) + kept_for(mail.kind, progress, self.config) - now
        if left < -self.config.late_tolerance:
            return None
        return min(max(left, 0.0), MAX_WAIT)

    def acquire(
        self,
        mail: Prepared,
        max_wait: float,
        not_before: float | None = None,
        *,
        order: str = "",
    ) -> Decision:
        """The limiter's decision for ``mail`` in every scope; ``not_before`` (epoch seconds,
        a hold's end) books the earliest slot at or after it. Where the limiter judges lateness
        (:attr:`judges_lateness`), a one-recipient mail's late run is judged in this same call;
        where it keeps the booked order, ``order`` (:meth:`order_of`) takes the slot of a later
        mail's future booking. Raises ``BackendUnavailable``, and ``Contended`` for several
        recipients that found no common slot."""
        if order and not mail.more_keys and self.limiter.keeps_order:
            return self.limiter.acquire(
                mail.limit_key,
                mail_id=mail.mail_id,
                max_wait=max_wait,
                not_before=not_before,
                late_after=self.config.late_tolerance if self.judges_lateness else None,
                order=order,
            )
        if mail.more_keys:  # several recipients: one slot that suits them all
            return acquire_all(
                _ForMail(self.limiter, mail),
                [mail.limit_key, *mail.more_keys],
                mail_id=mail.mail_id,
                max_wait=max_wait,
                not_before=not_before,
            )
        if self.judges_lateness:  # a late booked mail is judged inside the decision
            return self.limiter.acquire(
                mail.limit_key,
                mail_id=mail.mail_id,
                max_wait=max_wait,
                not_before=not_before,
                late_after=self.config.late_tolerance,
            )
        return self.limiter.acquire(
            mail.limit_key,
            mail_id=mail.mail_id,
            max_wait=max_wait,
            tenant=mail.tenant,
            share=mail.kind.share,
            not_before=not_before,
        )

    def order_of(self, mail: Prepared, progress: Progress) -> str:
        """``mail``'s place in its recipient's booked order: its kind's priority, then when it
        was sent (:func:`~mailer.limits.ordering.order_key`); "" when unknown (a message
        published without ``_order``, or one out of range)."""
        try:
            return order_key(mail.kind.priority, progress.order)
        except ValueError:
            return ""

    @property
    def judges_lateness(self) -> bool:
        """Whether the limiter judges a late run of a one-recipient mail itself, on its own
        clock, against the slots actually sent (:attr:`Limiter.judges_lateness`: a policy of
        recipient sliding tiers); else admission re-books a late run (give back, ask again)."""
        return self.limiter.judges_lateness

    def give_back(self, mail: Prepared) -> bool:
        """Release ``mail``'s slot in every recipient's key; whether one was held. Raises
        ``BackendUnavailable``."""
        if mail.more_keys:
            keys = [mail.limit_key, *mail.more_keys]
            return release_all(_ForMail(self.limiter, mail), keys, mail.mail_id)
        return self.limiter.release(mail.limit_key, mail.mail_id, tenant=mail.tenant)

    def release(self, mail: Prepared) -> None:
        """Give a slot back that will not be used (a failed, expired or cancelled mail): the
        recipient should not pay for it. A limiter that is down is logged, never raised."""
        try:
            self.give_back(mail)
        except BackendUnavailable:
            self._metrics.backend_down("limiter")
            log.warning(
                "mail %s: could not release its slot (limiter unavailable)",
                mail.mail_id,
                extra={"mail_id": mail.mail_id},
            )

    def answer(
        self,
        mail: Prepared,
        base: Outcome,
        progress: Progress,
        decision: Decision,
        *,
        late: bool = False,
        after: After | None = None,
    ) -> Admitted | Step:
        """What ``decision`` means for ``mail``: send now, wait for the booking, or drop
        (``rate_limited``; ``late`` for a late run re-booked; with its hold when ``after``)."""
        action = plan(decision)
        if isinstance(action, Send):  # admitted now: the limiter's now is at or after the slot
            return Admitted(due=action.at, admitted_at=max(self.stamp(), action.at))
        tier = _tier_name(decision, action.tier)
        if tier is None and after is not None:
            tier = after.tier()
        if isinstance(action, Drop):
            return _dropped(mail, base, decision, action, tier, late=late, after=after)
        local = self._clock()  # how this worker's Celery will read a due time (see _booked)
        if after is None:
            return _booked(base, action, tier, progress, local)
        detail = after.held_until()
        if action.due < after.hold.until:
            detail += " (a guess): booked at the latest slot its deadline allows"
        held = {"reason": why.HELD, "detail": detail, **after.fields(base)}
        return _booked(base, action, tier, progress, local, **held)

    def after_hold(
        self, mail: Prepared, base: Outcome, progress: Progress, after: After, *, holds_slot: bool
    ) -> Admitted | Step:
        """Give back the slot ``mail`` holds (if any) and book it at the earliest slot at or
        after the hold ends (:meth:`After.end`: the latest slot before its deadline when a
        guessed hold outlasts it), within its kind's deadline: ``deferred`` / ``held``, or
        :class:`Admitted` when the limiter's clock says the hold is already over; ``dropped``
        when no slot is left before the deadline.

        A limiter that is down defers (whatever ``fail_open`` says: sending would break the
        hold)."""
        try:
            window = self.window(mail, progress)
            if isinstance(window, Finish):
                return window
            now, max_wait = window
            if holds_slot or progress.due or progress.first_run_copy or progress.send_failures:
                self.give_back(mail)  # the slot it holds (a first run's copy: its admission)
            decision = self.acquire(
                mail,
                max_wait,
                not_before=after.end(now, max_wait),
                order=self.order_of(mail, progress),
            )
        except (BackendUnavailable, Contended) as exc:
            if isinstance(exc, Contended):
                return backend_down(self.config, base, progress, exc, why.CONTENDED)
            self._metrics.backend_down("limiter")
            return backend_down(self.config, base, progress, exc, why.LIMITER_UNAVAILABLE)
        return self.answer(mail, base, progress, decision, after=after)

    def _expired(self, mail: Prepared, progress: Progress, now: float) -> Finish:
        """``dropped`` / ``expired``: the kind's deadline, counted on the limiter's clock from
        when the guard first saw the mail, has passed."""
        allowed = kept_for(mail.kind, progress, self.config)
        deadline = progress.first_seen + allowed
        dropped = mail.base.but(
            reason=why.EXPIRED,
            detail=f"{human(now - progress.first_seen)} after the guard first saw it, kind "
            f"{mail.kind.name!r} allows {human(allowed)} (deadline {iso(deadline)})",
        )
        log.info("mail %s dropped: expired", mail.mail_id, extra=log_fields(dropped))
        if progress.due:
            self.release(mail)  # the recipient keeps the slot this mail will not use
        return Finish(dropped)


class _ForMail:
    """The limiter as :mod:`mailer.limits.multi` wants it: one key at a time, with the mail's
    tenant and kind share."""

    def __init__(self, limiter: Limiter, mail: Prepared) -> None:
        self.limiter = limiter
        self.mail = mail

    def acquire(
        self,
        key: str,
        *,
        mail_id: str | None = None,
        max_wait: float = 0.0,
        not_before: float | None = None,
    ) -> Decision:
        return self.limiter.acquire(
            key,
            mail_id=mail_id,
            max_wait=max_wait,
            tenant=self.mail.tenant,
            share=self.mail.kind.share,
            not_before=not_before,
        )

    def release(self, key: str, mail_id: str) -> bool:
        return self.limiter.release(key, mail_id, tenant=self.mail.tenant)


def _dropped(
    mail: Prepared,
    base: Outcome,
    decision: Decision,
    action: Drop,
    tier: str | None,
    *,
    late: bool,
    after: After | None,
) -> Finish:
    """``dropped``: no slot within the kind's wait (``late``: after re-booking a late run)."""
    if after is None:
        fields: dict[str, Any] = {"reason": why.LATE if late else why.RATE_LIMITED}
        fields["due"] = decision.at
        said = f"rate limited by {tier}, wait {human(action.wait)}"
    else:
        fields = {"reason": why.RATE_LIMITED, **after.fields(base)}
        fields["detail"] = f"{after.held_until()}: no slot within the kind's wait"
        said = f"{after.held_until()}, no slot in time"
    if backlog_full(decision):  # the scope keeps MAILGUARD_MAX_BOOKINGS entries already
        fields["detail"] = said = backlog_detail(decision)
    dropped = base.but(status="dropped", tier=tier, wait=action.wait, **fields)
    log.info("mail %s dropped: %s", mail.mail_id, said, extra=log_fields(dropped))
    return Finish(dropped)


def _booked(
    base: Outcome,
    action: Defer,
    tier: str | None,
    progress: Progress,
    local: float,
    **fields: Any,
) -> Later:
    """A booked mail: run again at its slot (or hop towards it; a hop is not a new deferral).

    ``fields`` change the outcome (a held mail: its reason, hold and reply). The run is timed
    on the limiter's clock (the ``Later``'s ``due``). A run that came back for this very slot
    while the limiter says it is not due yet was started early by a worker whose clock is ahead
    (``local``, this worker's clock, already past the slot): it waits the limiter's remaining
    ``wait`` on its own clock instead (to it, the ``due`` has passed: it would run again at
    once).
    """
    due: float | None = action.due
    new_booking = action.due != progress.due
    if not new_booking and local >= action.due:
        due = None
        log.warning(
            "mail %s ran %s before its slot by the limiter's clock: this worker's clock is "
            "ahead of the limiter's",
            base.mail_id,
            human(action.wait),
            extra={"mail_id": base.mail_id},
        )
    elif new_booking:
        progress = replace(
            progress,
            deferrals=progress.deferrals + 1,
            due=action.due,
            first_due=progress.first_due or action.due,
        )
    waiting = base.but(
        **{
            "status": "deferred",
            "reason": why.BOOKED,
            "tier": tier,
            "wait": action.wait,
            "due": action.due,
            "deferrals": progress.deferrals,
        }
        | fields
    )
    if new_booking:  # one line per booking; hops towards it are quiet
        log.info(
            "mail %s deferred %s to %s by %s",
            base.mail_id,
            human(action.wait),
            iso(action.due),
            tier or "the mails booked before it",
            extra=log_fields(waiting),
        )
    return Later(action.wait, waiting, progress, due)


def _tier_name(decision: Decision, tier: object) -> str | None:
    """The binding tier as outcomes show it: ``1/60s``, or with its scope, ``sender 14/1s``."""
    if tier is None:
        return None
    scope = decision.scope
    return f"{scope} {tier}" if scope and scope != "recipient" else str(tier)
