"""The holds gate: after a reply that asks to wait, wait it out instead of retrying at once.

Before admission, a mail meets the holds in force (the sender's, and its recipient's; see
:mod:`mailer.records.holds`): with one, it is booked at the earliest slot after the hold ends
(``deferred`` / ``held``) without opening an SMTP transaction. A hold whose length is a guess (no
delay stated by the server) never drops a mail whose deadline comes first: the mail is booked
at the latest slot its deadline allows, and goes then (:meth:`Booking.after_hold`).

On a send error (:func:`mailer.mail.replies.reaction_of`):

- greylisting: this mail alone is booked again after the reply's delay or the greylisting
  schedule's (:mod:`mailer.guard.retry_schedule`), never counted against a budget;
- a rate or quota reply holds the sender (or ``4.2.1``: that recipient) and books the mail
  after the hold;
- another temporary error is evidence: when ``hold_evidence`` distinct recipients failed so
  within its window (counted where every worker sees it), the sender is held; below that the
  default retry rule answers.

The holds live where the limiter does: a holds store that is down is the limiter down
(``fail_closed`` defers, ``fail_open`` goes on to the limiter). Use only with holds on
(``throttle_hold`` not None).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Any

from mailer import defaults
from mailer import outcomes as why
from mailer.durations import human
from mailer.errors import BackendUnavailable, TransientSendError
from mailer.guard.booking import GREYLISTING, PACE, After, Booking
from mailer.guard.data import Admitted, GuardConfig, Prepared, Refused, iso, log_fields
from mailer.guard.gates import Reads
from mailer.guard.gates.hold_notes import KnownHolds, cause_label, since
from mailer.guard.gates.provider_holds import PROVIDER, Met, held_by, met, provider_seconds
from mailer.guard.outage import backend_down
from mailer.guard.retry_schedule import expired, greylist_wait, next_try
from mailer.limits.keys import mail_tag
from mailer.mail.replies import Action, Reaction, reaction_of
from mailer.metrics import Metrics
from mailer.outcomes import Outcome
from mailer.records.holds import RECIPIENT, SENDER, Hold, Holds
from mailer.records.holds.keyed import Read
from mailer.records.holds.pace import Pace, SenderPace, provider_cap, sender_cap
from mailer.steps import Finish, Progress, Step

log = logging.getLogger("mailguard")

#: The ``cause`` label of holds started by evidence (failures across recipients).
EVIDENCE = "evidence"


class HoldsGate:
    """Books held mails after their hold; greylisted mails after their delay; starts a hold on
    a rate reply or on evidence."""

    def __init__(
        self, holds: Holds, booking: Booking, config: GuardConfig, metrics: Metrics
    ) -> None:
        self.holds = holds
        self.booking = booking
        self.config = config
        self.metrics = metrics
        # The holds this worker knows are in force, to log their end once.
        self._note = KnownHolds().note
        # When this thread's run last read the holds, for which mail, and what it saw there:
        # the ``since`` of each hold and of the pace stored, in force or not (see _asked).
        self._read = threading.local()

    def reads(self, mail: Prepared) -> Reads | None:
        return self.holds.plain_read(mail.limit_key)

    def before_admit(
        self, mail: Prepared, progress: Progress, raws: list[Any] | None
    ) -> Prepared | Admitted | Step:
        """With a hold in force, the mail booked after it (``deferred`` / ``held``, or
        :class:`Admitted` when the limiter's clock says it is over); else ``mail`` goes on. A
        mail at its slot whose deadline comes before a guessed hold's end goes on too."""
        self._read.mail = None
        try:
            read, at = self._take_read(mail, raws)
        except BackendUnavailable as exc:
            self.metrics.backend_down("limiter")
            if self.config.fail_open:
                return mail
            return backend_down(self.config, mail.base, progress, exc, why.LIMITER_UNAVAILABLE)
        paced = self.holds.pace.rate is not None and read.pace is not None
        scope, hold = self._strongest(mail, read, at)
        if hold is None or (progress.due and progress.due >= hold.until):
            # no hold, or already booked after it (a hop towards its slot): the paces, if any
            return self._paces(mail, progress, paced, at)
        if progress.due and not hold.stated:
            window = self.booking.window(mail, progress)
            if isinstance(window, Finish):
                return window
            now, max_wait = window
            if now + max_wait < hold.until:
                return mail  # booked before its deadline: it cannot wait the guess out
        pace = self._pace_of(scope) if scope != SENDER or paced else None
        if pace is not None:
            hold = self._paced_hold(mail, hold, pace)
        return self.booking.after_hold(
            mail, mail.base, progress, After(scope, hold), holds_slot=False
        )

    def _take_read(self, mail: Prepared, raws: list[Any] | None) -> tuple[Read, Met | None]:
        """The holds and paces ``mail`` meets (from ``raws``, else read now), and what it meets
        at its provider; the ``since`` of each remembered for this run (:meth:`_asked`)."""
        read = self.holds.read_raws(raws) if raws is not None else self.holds.read(mail.limit_key)
        at = met(self.holds, mail, read, self.holds.now())
        seen = {SENDER: since(read.sender), RECIPIENT: since(read.recipient)}
        seen[PACE] = since(read.pace)
        if at is not None:
            seen |= {at.scope: at.seen_hold, f"{at.scope} {PACE}": at.seen_pace}
        self._read.seen = seen
        self._read.mail = mail.mail_id
        return read, at

    def _strongest(self, mail: Prepared, read: Read, at: Met | None) -> tuple[str, Hold | None]:
        """Of the holds in force for ``mail`` (the sender's, its recipient's, its provider's),
        the one that ends last, with its scope; each noted (:meth:`_note`)."""
        sender, recipient = self.holds.in_force((read.sender, read.recipient))
        self._note(SENDER, SENDER, sender)
        self._note(mail.base.recipient or "", f"recipient {mail.base.recipient}", recipient)
        found = [(SENDER, sender), (RECIPIENT, recipient)]
        if at is not None:
            self._note(at.scope, at.scope, at.hold)
            found.append((at.scope, at.hold))
        held = [(hold.until, n, scope, hold) for n, (scope, hold) in enumerate(found) if hold]
        if not held:
            return SENDER, None
        _, _, scope, hold = max(held, key=lambda h: (h[0], -h[1]))  # a tie: the first
        return scope, hold

    def _pace_of(self, scope: str) -> SenderPace | None:
        """The pace after ``scope``'s hold: the relay's (``sender``), a provider's, or None (a
        recipient's hold, or the slow start off)."""
        if scope == RECIPIENT or self.holds.pace.rate is None:
            return None
        if scope == SENDER:
            return self.holds.pace
        return self.holds.provider_pace(scope.removeprefix(f"{PROVIDER} "))

    def _paces(
        self, mail: Prepared, progress: Progress, paced: bool, at: Met | None
    ) -> Prepared | Admitted | Step:
        """The relay's pace (when ``paced``), then the pace of the mail's provider after its
        hold (when stored): the mail goes on when both give it its slot now."""
        passed: Prepared | Admitted | Step = mail
        if paced:
            passed = self._pace(mail, progress, self.holds.pace, PACE)
        if passed is mail and at is not None and at.pace is not None:
            pace = self.holds.provider_pace(at.name)
            passed = self._pace(mail, progress, pace, f"{at.scope} {PACE}")
        return passed

    def _paced_hold(self, mail: Prepared, hold: Hold, pace: SenderPace) -> Hold:
        """``hold`` lasting, for ``mail``, until its slot in the ``pace`` after the hold (the
        pace starts at the hold's end, so held mails resume one after the other)."""
        try:
            taken = pace.take(str(mail_tag(mail.mail_id)))
        except BackendUnavailable:  # the hold alone, then (its end books the mail)
            self.metrics.backend_down("limiter")
            return hold
        if taken is not None and taken[0] > hold.until:
            return replace(hold, until=taken[0])
        return hold

    def _pace(
        self, mail: Prepared, progress: Progress, pace: SenderPace, scope: str
    ) -> Prepared | Admitted | Step:
        """A pace after a hold (the relay's, ``scope`` ``pace``; a provider's, ``provider
        <name> pace``): ``mail`` goes on at its slot (the one it holds, or the next when it is
        now); else it is booked at that slot (``deferred`` / ``held``, ``hold`` ``scope``). A
        mail whose deadline comes first goes on."""
        try:
            taken = pace.take(str(mail_tag(mail.mail_id)))
            if taken is None or taken[0] <= self.holds.now():
                return mail
            slot, current = taken
            window = self.booking.window(mail, progress)
        except BackendUnavailable as exc:
            self.metrics.backend_down("limiter")
            if self.config.fail_open:
                return mail
            return backend_down(self.config, mail.base, progress, exc, why.LIMITER_UNAVAILABLE)
        if isinstance(window, Finish):
            return window
        now, max_wait = window
        if progress.due and now + max_wait < slot:
            return mail  # booked before its deadline: it cannot wait for its pace slot
        whose = "the sender's" if scope == PACE else f"the sender's {scope}"
        cause = f"{whose} pace after a hold, {current.rate_at(slot):.3g} mails/s"
        wait = Hold(until=slot, level=current.level, cause=cause, since=now)
        after = After(scope, wait)
        return self.booking.after_hold(mail, mail.base, progress, after, holds_slot=False)

    def on_send_error(self, mail: Prepared, refused: Refused) -> Admitted | Step | None:
        """Greylisting books this mail after its delay; a rate reply holds the sender (or this
        recipient) and books the mail after the hold; a plain temporary error is counted as
        evidence (a hold once enough recipients failed). Other errors: None."""
        exc = refused.error
        if not isinstance(exc, TransientSendError):
            return None
        reaction = reaction_of(exc)
        if reaction.action is Action.GREYLIST:
            return self._greylisted(mail, refused, reaction)
        if reaction.action is Action.RETRY:
            return self._witness(mail, refused)
        configured = self.config.throttle_hold or defaults.THROTTLE_HOLD
        seconds, stated = reaction.hold or configured, bool(reaction.hold)
        scope = SENDER if reaction.action is Action.HOLD_SENDER else RECIPIENT
        provider = held_by(self.holds, mail, reaction) if scope == SENDER else None
        if provider is not None:  # the provider's rate reply: that provider's mail alone
            scope = f"{PROVIDER} {provider}"
            seconds, stated = provider_seconds(reaction, configured)
        cause = f"{exc.code or ''} {exc.reply or ''}".strip()
        label = cause_label(exc.code, exc.reply)
        return self._hold(
            mail, refused, scope=scope, seconds=seconds, cause=cause, label=label, stated=stated
        )

    def _greylisted(
        self, mail: Prepared, refused: Refused, reaction: Reaction
    ) -> Admitted | Step | None:
        """This mail alone, booked again after the greylisting delay (the reply's, else the
        greylisting schedule's: :func:`~mailer.guard.retry_schedule.greylist_wait`); never
        counted against a budget, kept until its kind's lifetime (then ``dropped`` /
        ``expired`` with this reply)."""
        exc, progress = refused.error, refused.progress
        if not isinstance(exc, TransientSendError):
            return None
        progress = replace(progress, greylists=progress.greylists + 1)
        base = refused.base.but(
            attempts=progress.attempts, smtp_code=exc.code, smtp_reply=exc.reply
        )
        now = self.holds.now()
        delay = reaction.hold or greylist_wait(self.config, progress.greylists)
        # A stated delay past the lifetime ends the mail now; a guessed one leaves a last try.
        gap = delay if reaction.hold else min(self.config.greylist_delay, self.config.retry_backoff)
        wait = next_try(self.config, mail.kind, progress, now, delay, min_gap=gap)
        if wait is None:
            self.booking.release(mail)
            done = expired(base, progress, exc, kind=mail.kind, config=self.config, now=now)
            log.warning("mail %s dropped: greylisted past its lifetime", mail.mail_id,
                        extra=log_fields(done.outcome))  # fmt: skip
            return done
        cause = f"{exc.code} {exc.reply or ''}".strip()
        stated = bool(reaction.hold) and wait == delay
        hold = Hold(until=now + wait, level=0, cause=cause, since=now, stated=stated)
        after = After(GREYLISTING, hold)
        return self.booking.after_hold(mail, base, progress, after, holds_slot=True)

    def _witness(self, mail: Prepared, refused: Refused) -> Admitted | Step | None:
        """Count this recipient's temporary failure; the failure that completes the evidence
        holds the sender. Else None (the default retry rule answers)."""
        if self.config.hold_evidence is None:
            return None
        count, window = self.config.hold_evidence
        try:
            seen = self.holds.witness(mail.limit_key, window, count)
        except BackendUnavailable:
            self.metrics.backend_down("limiter")
            return None
        if seen < count:
            return None
        exc = refused.error
        cause = (
            f"{count} recipients failed within {human(window)}, the last with "
            f"{exc.code or ''} {exc.reply or exc.reason}"
        ).replace("  ", " ")
        seconds = self.config.throttle_hold or defaults.THROTTLE_HOLD
        return self._hold(
            mail, refused, scope=SENDER, seconds=seconds, cause=cause, label=EVIDENCE, stated=False
        )

    def _hold(
        self,
        mail: Prepared,
        refused: Refused,
        *,
        scope: str,
        seconds: float,
        cause: str,
        label: str,
        stated: bool,
    ) -> Admitted | Step:
        """Start (or double) the hold of ``scope``, then book the mail after it."""
        exc, progress = refused.error, refused.progress
        base = refused.base.but(
            attempts=progress.attempts,
            smtp_code=exc.code,
            smtp_reply=exc.reply,
            provider=exc.provider,
        )
        asked = self._asked(mail, refused.base.due, scope)
        before = self.holds.now()
        try:
            paced = scope == SENDER and self.holds.pace.rate is not None
            if paced:
                at = self._asked(mail, refused.base.due, PACE)
                slowed = self.holds.pace.slow(before if at is None else at)
                if slowed is not None:  # paced after a hold: halve the pace, no new hold
                    return self._slowed(mail, base, progress, slowed, cause=cause, at=before)
            hold = self._write(
                mail, scope, seconds, cause, asked=asked, stated=stated, due=refused.base.due
            )
        except BackendUnavailable as down:
            # The hold could not be written: its store is the limiter's, so the limiter is
            # down too; defer (fail_closed or not: this mail was just refused).
            self.metrics.backend_down("limiter")
            self.booking.release(mail)
            return backend_down(self.config, base, progress, down, why.LIMITER_UNAVAILABLE)
        who = name = scope  # the sender, or a provider (``provider google``)
        if scope == RECIPIENT:
            who, name = f"recipient {mail.base.recipient}", mail.base.recipient or ""
        self._note(name, who, hold)
        written = hold.written  # of refusals at once, one writes the hold and tells it
        if written:
            self.metrics.hold(scope, label)
            log.warning(
                "hold started: %s until %s (%s), %s",
                who,
                iso(hold.until),
                cause,
                f"{human(hold.length)} stated by the server" if hold.stated else
                f"{human(hold.length)}, level {hold.level}",
                extra=log_fields(base) | {"hold": scope, "until": hold.until, "level": hold.level},
            )  # fmt: skip
        if scope != RECIPIENT and self.holds.pace.rate is not None:
            hold = self._start_pace(mail, hold, written=written, scope=scope)
        return self.booking.after_hold(mail, base, progress, After(scope, hold), holds_slot=True)

    def _write(
        self,
        mail: Prepared,
        scope: str,
        seconds: float,
        cause: str,
        *,
        asked: float | None,
        stated: bool,
        due: float | None,
    ) -> Hold:
        """Start (or double) the hold of ``scope``. A provider's: its pace, if one is on, first
        learns the count per window the refusal tells (:meth:`SenderPace.slow`), which the pace
        after the new hold starts from; the provider is held again (its rule: wait, then resume
        one at a time), not merely slowed."""
        if scope == SENDER:
            return self.holds.hold_sender(seconds, cause, asked=asked, stated=stated)
        if scope == RECIPIENT:
            return self.holds.hold_recipient(
                mail.limit_key, seconds, cause, asked=asked, stated=stated
            )
        pace = self._pace_of(scope)
        if pace is not None:
            at = self._asked(mail, due, f"{scope} {PACE}")
            pace.slow(self.holds.now() if at is None else at)
        name = scope.removeprefix(f"{PROVIDER} ")
        return self.holds.hold_provider(name, seconds, cause, asked=asked, stated=stated)

    def _asked(self, mail: Prepared, due: float | None, what: str) -> float | None:
        """When the refused send was asked for, as the doubling rule of a hold (``what``:
        ``sender`` or ``recipient``) or of the pace (``pace``) compares it with the ``since``
        of the one stored when the reply came: a send doubles (or halves) only the one its own
        run saw. So this run's read gives the ``since`` it saw there, 0.0 when it saw none
        (a hold or pace written after that read, by another worker's refusal of the same
        burst, is the same throttling, whatever the two workers' clocks say). Without that
        read, the mail's admission (``due``; None: now)."""
        if getattr(self._read, "mail", None) != mail.mail_id:
            return due
        seen: float = self._read.seen.get(what, 0.0)  # a provider's not read: none stored
        return seen

    def _start_pace(self, mail: Prepared, hold: Hold, *, written: bool, scope: str) -> Hold:
        """Start the slow start at the end of ``scope``'s ``hold`` (the sender's or a
        provider's; when it was ``written`` now), bounded by the policy's tiers for it
        (:func:`sender_cap`, :func:`provider_cap`); ``hold`` lasting until ``mail``'s slot in
        it. A pace that cannot be written leaves the hold to end in one go (logged)."""
        policy = self.booking.limiter.policy
        slow = self._pace_of(scope)
        assert slow is not None  # the caller's check
        name = scope.removeprefix(f"{PROVIDER} ")
        cap = sender_cap(policy) if scope == SENDER else provider_cap(policy, name)
        try:
            pace = slow.start(hold.until, cap) if written else None
            hold = self._paced_hold(mail, hold, slow)
        except BackendUnavailable:
            self.metrics.backend_down("limiter")
            log.warning("the %s pace after the hold could not be written or read", scope)
            return hold
        if pace is not None:
            log.info(
                "pace started: %s at %.3g mails/s from %s, +%.3g mails/s each second%s",
                scope,
                pace.rate,
                iso(pace.since),
                pace.step,
                f" up to the tiers' {pace.cap:.3g}/s" if pace.cap else "",
                extra={"hold": scope, "pace": pace.rate},
            )
        return hold

    def _slowed(
        self,
        mail: Prepared,
        base: Outcome,
        progress: Progress,
        pace: Pace,
        *,
        cause: str,
        at: float,
    ) -> Admitted | Step:
        """The pace was slowed (or had been, for a send admitted before): book ``mail`` at its
        next slot in it, with the reply that slowed it as the cause."""
        if pace.written:  # of refusals at once, one slows the pace and tells it
            learned = f", {pace.quota} per {pace.window:g} s learned" if pace.quota else ""
            log.warning(
                "pace slowed: sender at %.3g mails/s%s (%s), level %d",
                pace.rate,
                learned,
                cause,
                pace.level,
                extra=log_fields(base) | {"hold": SENDER, "pace": pace.rate},
            )
        taken = self.holds.pace.take(str(mail_tag(mail.mail_id)))
        slot = at if taken is None else taken[0]
        wait = Hold(until=slot, level=pace.level, cause=cause, since=at)
        return self.booking.after_hold(mail, base, progress, After(PACE, wait), holds_slot=True)
