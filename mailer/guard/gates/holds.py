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
from mailer.guard.outage import backend_down
from mailer.guard.retry_schedule import expired, greylist_wait, next_try
from mailer.limits.keys import mail_tag
from mailer.mail.replies import Action, Reaction, enhanced_status, reaction_of
from mailer.metrics import Metrics
from mailer.outcomes import Outcome
from mailer.records.holds import RECIPIENT, SENDER, Hold, Holds
from mailer.records.holds.pace import Pace, decode_pace, sender_cap
from mailer.steps import Finish, Progress, Step

log = logging.getLogger("mailguard")

#: Recipient holds a worker remembers (to log their end once); the oldest are forgotten first.
_KNOWN_HOLDS = 1024
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
        # The holds this worker knows are in force (scope or recipient hash -> until), to log
        # their end once.
        self._known: dict[str, float] = {}
        self._known_lock = threading.Lock()
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
            if raws is not None:
                stored = self.holds.stored_from_raws(raws)
            else:
                stored = self.holds.stored(mail.limit_key)
            sender, recipient = self.holds.in_force(stored)
            pace = self._pace_read(raws)
            paced = pace is not None
            self._read.seen = {
                SENDER: _since(stored[0]),
                RECIPIENT: _since(stored[1]),
                PACE: _since(pace),
            }
            self._read.mail = mail.mail_id
        except BackendUnavailable as exc:
            self.metrics.backend_down("limiter")
            if self.config.fail_open:
                return mail
            return backend_down(self.config, mail.base, progress, exc, why.LIMITER_UNAVAILABLE)
        self._note(SENDER, SENDER, sender)
        self._note(mail.base.recipient or "", f"recipient {mail.base.recipient}", recipient)
        scope, hold = (SENDER, sender) if sender is not None else (RECIPIENT, recipient)
        if recipient is not None and (sender is None or recipient.until > sender.until):
            scope, hold = RECIPIENT, recipient
        if hold is None or (progress.due and progress.due >= hold.until):
            # no hold, or already booked after it (a hop towards its slot): the pace, if any
            return self._pace(mail, progress) if paced else mail
        if progress.due and not hold.stated:
            window = self.booking.window(mail, progress)
            if isinstance(window, Finish):
                return window
            now, max_wait = window
            if now + max_wait < hold.until:
                return mail  # booked before its deadline: it cannot wait the guess out
        if scope == SENDER and paced:
            hold = self._paced_hold(mail, hold)
        return self.booking.after_hold(
            mail, mail.base, progress, After(scope, hold), holds_slot=False
        )

    def _paced_hold(self, mail: Prepared, hold: Hold) -> Hold:
        """``hold`` lasting, for ``mail``, until its slot in the pace after the hold (the pace
        starts at the hold's end, so held mails resume one after the other)."""
        try:
            taken = self.holds.pace.take(str(mail_tag(mail.mail_id)))
        except BackendUnavailable:  # the hold alone, then (its end books the mail)
            self.metrics.backend_down("limiter")
            return hold
        if taken is not None and taken[0] > hold.until:
            return replace(hold, until=taken[0])
        return hold

    def _pace_read(self, raws: list[Any] | None) -> Pace | None:
        """The pace that may be in force (its key read with the holds, or, read alone, one in
        force); None when there is none or the slow start is off."""
        if self.holds.pace.rate is None:
            return None
        if raws is not None and len(raws) > 2:
            return decode_pace(raws[2])
        return self.holds.pace.current()

    def _pace(self, mail: Prepared, progress: Progress) -> Prepared | Admitted | Step:
        """The sender's pace after a hold: ``mail`` goes on at its slot (the one it holds, or
        the next when it is now); else it is booked at that slot (``deferred`` / ``held``,
        ``hold`` ``pace``). A mail whose deadline comes first goes on."""
        pace = self.holds.pace
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
        cause = f"the sender's pace after a hold, {current.rate_at(slot):.3g} mails/s"
        wait = Hold(until=slot, level=current.level, cause=cause, since=now)
        after = After(PACE, wait)
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
        seconds = reaction.hold or self.config.throttle_hold or defaults.THROTTLE_HOLD
        scope = SENDER if reaction.action is Action.HOLD_SENDER else RECIPIENT
        cause = f"{exc.code or ''} {exc.reply or ''}".strip()
        label = _cause_label(exc.code, exc.reply)
        stated = bool(reaction.hold)
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
            if scope == SENDER:
                hold = self.holds.hold_sender(seconds, cause, asked=asked, stated=stated)
            else:
                hold = self.holds.hold_recipient(
                    mail.limit_key, seconds, cause, asked=asked, stated=stated
                )
        except BackendUnavailable as down:
            # The hold could not be written: its store is the limiter's, so the limiter is
            # down too; defer (fail_closed or not: this mail was just refused).
            self.metrics.backend_down("limiter")
            self.booking.release(mail)
            return backend_down(self.config, base, progress, down, why.LIMITER_UNAVAILABLE)
        who = SENDER if scope == SENDER else f"recipient {mail.base.recipient}"
        name = SENDER if scope == SENDER else mail.base.recipient or ""
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
        if scope == SENDER and self.holds.pace.rate is not None:
            hold = self._start_pace(mail, hold, written=written)
        return self.booking.after_hold(mail, base, progress, After(scope, hold), holds_slot=True)

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
        seen: float = self._read.seen[what]
        return seen

    def _start_pace(self, mail: Prepared, hold: Hold, *, written: bool) -> Hold:
        """Start the slow start at the end of the sender's ``hold`` (when it was ``written``
        now), bounded by the policy's sender tier; ``hold`` lasting until ``mail``'s slot in
        it. A pace that cannot be written leaves the hold to end in one go (logged)."""
        try:
            pace = None
            if written:
                pace = self.holds.pace.start(hold.until, sender_cap(self.booking.limiter.policy))
            hold = self._paced_hold(mail, hold)
        except BackendUnavailable:
            self.metrics.backend_down("limiter")
            log.warning("the sender's pace after the hold could not be written or read")
            return hold
        if pace is not None:
            log.info(
                "pace started: sender at %.3g mails/s from %s, +%.3g mails/s each second%s",
                pace.rate,
                iso(pace.since),
                pace.step,
                f" up to the sender tier's {pace.cap:.3g}/s" if pace.cap else "",
                extra={"hold": SENDER, "pace": pace.rate},
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

    def _note(self, name: str, who: str, hold: Hold | None) -> None:
        """Remember the holds this worker has seen; log once when one it knew has ended."""
        with self._known_lock:
            if hold is not None:
                self._known.pop(name, None)
                self._known[name] = hold.until
                while len(self._known) > _KNOWN_HOLDS:
                    del self._known[next(iter(self._known))]
                return
            if self._known.pop(name, None) is None:
                return
        log.info("hold ended: %s", who, extra={"hold": who})


def _cause_label(code: int | None, reply: str | None) -> str:
    """A bounded metrics label for a reply: its code and enhanced status (``454 4.7.0``);
    ``provider`` for an API's answer (no SMTP code)."""
    if code is None:
        return "provider"
    status = enhanced_status(reply or "")
    return f"{code} {status}" if status else str(code)


def _since(found: Hold | Pace | None) -> float:
    """The ``since`` of a hold or pace read, 0.0 for none (earlier than any stored one)."""
    return 0.0 if found is None else found.since
