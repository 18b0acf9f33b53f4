"""The guard: one run of one mail, from its raw request to a :data:`~mailer.steps.Step`.

A run is a short pipeline of named steps; each is a small method that returns plain data:

1. **validate** (:meth:`Guard._validate`): normalise the address, render the kind, build the
   message: a :class:`Prepared` mail, or ``Finish`` (``dropped`` / ``invalid``).
2. **claim** (:meth:`Guard._claim`): one atomic ledger ``begin`` on the mail id: claimed, or
   ``Finish`` with the recorded outcome (a repeat), or ``Later`` (held by another run, or the
   ledger is down).
3. **admit** (:meth:`Guard._admit`): the limiter with reservations, then
   :func:`~mailer.steps.plan`: :class:`Go` (send now), or ``Later`` (booked; limiter down), or
   ``Finish`` (``dropped`` / ``rate_limited``).
4. **send** (:meth:`Guard._send`): through the transport: ``Finish`` (``sent``), ``Later``
   (a transient SMTP error) or ``Fail``.
5. **record** (:meth:`Guard._settle`): the one place that carries out the ledger's effects once
   a run holds the claim: record a final outcome (sent, dropped or failed: final means final),
   or give the claim back to run again; a failed mail also gives its slot back, so the
   recipient does not pay for our failure.

The words of each result (``plan`` → ``Step`` → outcome → Celery state) are in
:mod:`mailer.steps`. The guard never imports Celery; ``workers/tasks.py`` carries a step out.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, replace
from email.message import EmailMessage

from mailer import defaults
from mailer import outcomes as why
from mailer.clock import Clock, system_clock
from mailer.errors import (
    BackendUnavailable,
    Contended,
    InvalidAddress,
    InvalidMessage,
    PermanentSendError,
    TransientSendError,
)
from mailer.guard.data import (
    Go,
    GuardConfig,
    MailRequest,
    Prepared,
    failure,
    iso,
    log_fields,
    mapping,
)
from mailer.limits.checks import check_tenant
from mailer.limits.decision import Decision
from mailer.limits.limiter import MAX_WAIT, Limiter
from mailer.limits.multi import acquire_all, release_all
from mailer.mail.address import Recipient, normalise_address
from mailer.mail.envelope import addresses, attachments, reply_to, sender, without_recipients
from mailer.mail.kinds import Kind, Kinds, render
from mailer.mail.message import Mail, build_message, check_mail, message_id, needs_build_to_check
from mailer.mail.replies import Action, Reaction, classify, enhanced_status
from mailer.mail.transports.base import Transport
from mailer.metrics import UNGUARDED, UNKNOWN_KIND, Metrics, default_metrics
from mailer.outcomes import Outcome
from mailer.records.holds import RECIPIENT, SENDER, Hold, Holds
from mailer.records.ledger import Ledger
from mailer.records.suppression import Suppression, Suppressions
from mailer.steps import Defer, Drop, Fail, Finish, Later, Progress, Send, Step, plan
from mailer.storage import REDIS_DOWN

__all__ = ["Fail", "Finish", "Guard", "GuardConfig", "Later", "MailRequest", "Progress", "Step"]

log = logging.getLogger("mailguard")

#: Recipient holds a worker remembers (to log their end once); the oldest are forgotten first.
_KNOWN_HOLDS = 1024


class Guard:
    """Carries one mail through validate, claim, admit, send, record. Thread-safe if its parts
    are. Never raises for bad input: that is a ``dropped`` outcome."""

    def __init__(
        self,
        limiter: Limiter,
        ledger: Ledger,
        transport: Transport,
        *,
        kinds: Kinds | None = None,
        config: GuardConfig | None = None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        suppressions: Suppressions | None = None,
        holds: Holds | None = None,
    ) -> None:
        self.limiter = limiter
        self.ledger = ledger
        self.transport = transport
        self.kinds = kinds or Kinds.defaults()
        self.config = config or GuardConfig()
        self._clock = clock or system_clock
        #: Addresses not to contact (hard bounces); in this process unless given.
        self.suppressions = suppressions or Suppressions.from_url("memory://", clock=self._clock)
        #: Holds after throttling replies (:mod:`mailer.records.holds`); None when holds are off
        #: (``throttle_hold`` None). In this process unless given.
        self.holds: Holds | None = None
        if self.config.throttle_hold is not None:
            self.holds = holds or Holds.from_url(
                "memory://", clock=self._clock, max_hold=self.config.throttle_hold_max
            )
        # The holds this worker knows are in force (scope or recipient hash -> until), to log
        # their end once.
        self._known: dict[str, float] = {}
        self._known_lock = threading.Lock()
        #: Where each run is counted (:mod:`mailer.metrics`); ``NO_METRICS`` counts nothing.
        self.metrics = metrics if metrics is not None else default_metrics()

    def process(self, request: MailRequest, progress: Progress | None = None) -> Step:
        """One run of one mail, counted in the metrics."""
        step, repeated = self._run(request, progress or Progress())
        kind = step.outcome.kind
        label = kind if kind in self.kinds else UNKNOWN_KIND
        hop = (
            isinstance(step, Later)
            and progress is not None
            and step.progress.deferrals == progress.deferrals
            and step.outcome.reason == why.BOOKED
        )
        if repeated:
            self.metrics.repeat(label)
        elif not hop:  # a hop towards the same booked slot is not another deferral
            self.metrics.record(step.outcome, label)
            first_due = progress.first_due if progress else 0.0
            sent_at = step.outcome.sent_at
            if step.outcome.status == "sent" and sent_at is not None and first_due:
                self.metrics.after_first_slot(label, sent_at - first_due)
        return step

    def _run(self, request: MailRequest, progress: Progress) -> tuple[Step, bool]:
        """The step, and whether the mail had already finished (a repeated run)."""
        prepared = self._validate(request, progress)
        if not isinstance(prepared, Prepared):
            return prepared, False
        owner = uuid.uuid4().hex
        held = self._claim(prepared, owner, progress)
        if held is not None:
            return held, not isinstance(held, Later)
        progress = replace(progress, stale_owner="")
        if not progress.requested_at:
            # A message from another producer carries no request time: its first run's.
            progress = replace(progress, requested_at=prepared.base.decided_at or self._clock())
        if prepared.more_keys:  # several recipients: the suppressed ones leave the envelope
            kept = self._without_suppressed(prepared, progress)
            if not isinstance(kept, Prepared):
                return self._settle(prepared, owner, kept, guarded=False), False
            prepared = kept
        known = None if prepared.more_keys else self._read_together(prepared)
        go = (
            self._unless_suppressed(prepared, progress, known)
            or self._unless_held(prepared, progress, known)
            or self._admit(prepared, progress)
        )
        step = self._send(prepared, go, progress) if isinstance(go, Go) else go
        return self._settle(prepared, owner, step, guarded=isinstance(go, Go) and go.guarded), False

    # 1. validate ---------------------------------------------------------------------------

    def _validate(self, request: MailRequest, progress: Progress) -> Prepared | Finish:
        """The mail ready to send, or ``dropped`` / ``invalid`` with the reason."""
        now = self._clock()
        base = Outcome(
            status="dropped",
            mail_id=request.mail_id,
            kind=request.kind if isinstance(request.kind, str) else "?",
            attempts=progress.attempts,
            deferrals=progress.deferrals,
            decided_at=now,
        )
        try:
            recipient, more, kind, draft, message = self._build(request, now)
            hashed = self.limiter.storage_key("recipient", recipient.limit_key)
            tenant = None if request.tenant is None else check_tenant(request.tenant)
        except (InvalidAddress, InvalidMessage, ValueError) as exc:
            dropped = base.but(reason=why.INVALID, detail=str(exc))
            log.info(
                "mail %s dropped: invalid input: %s",
                request.mail_id,
                exc,
                extra=log_fields(dropped),
            )
            return Finish(dropped)
        return Prepared(
            mail_id=request.mail_id,
            kind=kind,
            limit_key=recipient.limit_key,
            draft=draft,
            message=message,
            built_at=now,
            tenant=tenant,
            more_keys=more,
            base=base.but(
                recipient=hashed, message_id=message_id(request.mail_id, self.config.sender)
            ),
        )

    def _build(
        self, request: MailRequest, now: float
    ) -> tuple[Recipient, tuple[str, ...], Kind, Mail, EmailMessage | None]:
        """Normalise, render and check; raises ``InvalidAddress`` / ``InvalidMessage``.

        Returns the first recipient (its key is the mail's), the limit keys of the other
        envelope recipients (deduplicated), the kind, the mail and its message if it had to be
        built to be checked. Building is most of a run's own cost, so a mail that will wait
        (booked, parked) is only checked (:func:`mailer.mail.message.check_mail`).
        """
        to = [normalise_address(a, self.config.rules) for a in addresses(request.to, "to")]
        cc = [normalise_address(a, self.config.rules) for a in addresses(request.cc, "cc")]
        bcc = [normalise_address(a, self.config.rules) for a in addresses(request.bcc, "bcc")]
        everyone = [*to, *cc, *bcc]
        if not everyone:
            raise InvalidAddress("to: no address")
        keys = list(dict.fromkeys(r.limit_key for r in everyone))
        kind = self.kinds[request.kind if isinstance(request.kind, str) else "?"]
        context = mapping(request.context, "context")
        headers = mapping(request.headers, "headers")
        subject, body, html = render(kind, request.subject, request.body, request.html, context)
        mail = Mail(
            to=tuple(r.address for r in to),
            subject=subject,
            body=body,
            html=html,
            mail_id=request.mail_id,
            sender=sender(request.from_email, self.config.sender, self.config.rules),
            headers=headers,
            cc=tuple(r.address for r in cc),
            bcc=tuple(r.address for r in bcc),
            reply_to=tuple(reply_to(request.reply_to, self.config.rules)),
            attachments=attachments(request.attachments),
        )
        if needs_build_to_check(mail):
            return everyone[0], tuple(keys[1:]), kind, mail, build_message(mail, now=now)
        check_mail(mail)
        return everyone[0], tuple(keys[1:]), kind, mail, None

    def _message(self, mail: Prepared) -> EmailMessage:
        """The mail's message, built now unless it was built to be checked."""
        if mail.message is not None:
            return mail.message
        return build_message(mail.draft, now=mail.built_at)

    # 2. claim ------------------------------------------------------------------------------

    def _claim(self, mail: Prepared, owner: str, progress: Progress) -> Step | None:
        """None when this run now holds the claim; else what to answer instead: the recorded
        outcome of a finished mail (``Finish``, or ``Fail`` for a failed one), or ``Later``."""
        stale = progress.stale_owner or None
        try:
            begun = self.ledger.begin(mail.mail_id, owner, self.config.claim_lease, takeover=stale)
        except BackendUnavailable as exc:
            # Without the ledger no run can promise "once": defer, whatever the fail mode. The
            # claim may have been written after the client gave up: the next run may take it.
            self.metrics.backend_down("ledger")
            progress = replace(progress, stale_owner=owner)
            return self._backend_down(mail.base, progress, exc, why.LEDGER_UNAVAILABLE)
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
        if begun:
            return None
        wait = defaults.IN_FLIGHT_WAIT
        waiting = mail.base.but(status="deferred", reason=why.IN_FLIGHT, wait=wait)
        log.info(
            "mail %s is being sent by another run; checking again later",
            mail.mail_id,
            extra=log_fields(waiting),
        )
        return Later(wait, waiting, progress)

    def _read_together(self, mail: Prepared) -> _Known | None:
        """The recipient's suppression and both holds read in one ``MGET`` when the suppression
        list and the holds share one Redis client (one round trip instead of two); None when
        they do not, or when that read fails (the separate reads then answer, each with its own
        outage rule)."""
        if self.holds is None:
            return None
        suppression = self.suppressions.plain_read(mail.limit_key)
        holds = self.holds.plain_read(mail.limit_key)
        if suppression is None or holds is None or suppression[0] is not holds[0]:
            return None
        try:
            raws = suppression[0].mget([suppression[1], *holds[1]])
        except REDIS_DOWN:
            return None
        return _Known(self.suppressions.from_raw(raws[0]), self.holds.from_raws(raws[1:]))

    def _unless_suppressed(
        self, mail: Prepared, progress: Progress, known: _Known | None = None
    ) -> Step | None:
        """``dropped`` / ``suppressed`` for an address whose mailbox is gone, else None."""
        try:
            entry = known.suppression if known else self.suppressions.suppressed(mail.limit_key)
        except BackendUnavailable as exc:
            self.metrics.backend_down("ledger")
            return self._backend_down(mail.base, progress, exc, why.LEDGER_UNAVAILABLE)
        if entry is None:
            return None
        dropped = mail.base.but(
            reason=why.SUPPRESSED,
            smtp_reply=entry.cause,
            detail=f"suppressed until {iso(entry.until)}",
        )
        log.info("mail %s dropped: recipient suppressed", mail.mail_id, extra=log_fields(dropped))
        return Finish(dropped)

    def _without_suppressed(self, mail: Prepared, progress: Progress) -> Prepared | Step:
        """A message to several recipients without the suppressed ones (their addresses taken
        out of To, Cc and Bcc); ``dropped`` / ``suppressed`` when every one is."""
        keys = [mail.limit_key, *mail.more_keys]
        try:
            gone = {k for k in keys if self.suppressions.suppressed(k) is not None}
        except BackendUnavailable as exc:
            self.metrics.backend_down("ledger")
            return self._backend_down(mail.base, progress, exc, why.LEDGER_UNAVAILABLE)
        if not gone:
            return mail
        kept = [k for k in keys if k not in gone]
        if not kept:
            return self._unless_suppressed(mail, progress) or Finish(mail.base)
        message = without_recipients(self._message(mail), gone, self.config.rules)
        log.info(
            "mail %s: %d suppressed recipients left out of %d",
            mail.mail_id,
            len(gone),
            len(keys),
            extra=log_fields(mail.base),
        )
        return replace(mail, limit_key=kept[0], more_keys=tuple(kept[1:]), message=message)

    # holds ------------------------------------------------------------------------------

    def _unless_held(
        self, mail: Prepared, progress: Progress, known: _Known | None = None
    ) -> Go | Step | None:
        """With a hold in force (the sender's, or this recipient's), book the mail after it
        (``deferred`` / ``held``) without opening an SMTP transaction; else None.

        One read of both holds (one round trip). The holds store down is the limiter down:
        ``fail_closed`` defers, ``fail_open`` goes on to the limiter.
        """
        if self.holds is None:
            return None
        try:
            sender, recipient = known.holds if known else self.holds.active(mail.limit_key)
        except BackendUnavailable as exc:
            self.metrics.backend_down("limiter")
            if self.config.fail_open:
                return None
            return self._backend_down(mail.base, progress, exc, why.LIMITER_UNAVAILABLE)
        self._note(SENDER, SENDER, sender)
        self._note(mail.base.recipient or "", f"recipient {mail.base.recipient}", recipient)
        scope, hold = (SENDER, sender) if sender is not None else (RECIPIENT, recipient)
        if recipient is not None and (sender is None or recipient.until > sender.until):
            scope, hold = RECIPIENT, recipient
        if hold is None or (progress.due and progress.due >= hold.until):
            return None  # no hold, or already booked after it (a hop towards its slot)
        return self._book_after(mail, mail.base, progress, scope, hold, holds_slot=False)

    def _throttled(
        self,
        mail: Prepared,
        base: Outcome,
        progress: Progress,
        exc: TransientSendError,
        reaction: Reaction,
    ) -> Step:
        """The server asked us to slow down: hold the sender (or this recipient), give the slot
        back and book the mail after the hold, instead of retrying it at once."""
        assert self.holds is not None
        progress = replace(progress, attempts=progress.attempts + exc.attempts)
        base = base.but(attempts=progress.attempts, smtp_code=exc.code, smtp_reply=exc.reply)
        seconds = reaction.hold or self.config.throttle_hold or defaults.THROTTLE_HOLD
        cause = f"{exc.code} {exc.reply or ''}".strip()
        scope = SENDER if reaction.action is Action.HOLD_SENDER else RECIPIENT
        try:
            if scope == SENDER:
                hold = self.holds.hold_sender(seconds, cause)
            else:
                hold = self.holds.hold_recipient(mail.limit_key, seconds, cause)
        except BackendUnavailable as down:
            # The hold could not be written: its store is the limiter's, so the limiter is
            # down too; defer (fail_closed or not: this mail was just refused).
            self.metrics.backend_down("limiter")
            self._release(mail)
            return self._backend_down(base, progress, down, why.LIMITER_UNAVAILABLE)
        who = SENDER if scope == SENDER else f"recipient {mail.base.recipient}"
        self._note(SENDER if scope == SENDER else mail.base.recipient or "", who, hold)
        self.metrics.hold(scope, _cause_label(exc.code, exc.reply))
        log.warning(
            "hold started: %s until %s (%s)",
            who,
            iso(hold.until),
            cause,
            extra=log_fields(base) | {"hold": scope, "until": hold.until, "level": hold.level},
        )
        booked = self._book_after(mail, base, progress, scope, hold, holds_slot=True)
        return self._send(mail, booked, progress) if isinstance(booked, Go) else booked

    def _book_after(
        self,
        mail: Prepared,
        base: Outcome,
        progress: Progress,
        scope: str,
        hold: Hold,
        *,
        holds_slot: bool,
    ) -> Go | Step:
        """Give back the slot ``mail`` holds (if any) and book it at the earliest slot at or
        after ``hold`` ends, within its kind's deadline: ``deferred`` / ``held`` (or ``Go`` when
        the limiter's clock says the hold is already over)."""
        now = self._clock()
        left = progress.requested_at + mail.kind.max_wait - now
        if left < -self.config.late_tolerance:
            return self._expired(mail, progress, now)
        try:
            if holds_slot or progress.due:
                self._give_back(mail)
            decision = self._acquire(mail, min(max(left, 0.0), MAX_WAIT), not_before=hold.until)
        except BackendUnavailable as exc:
            self.metrics.backend_down("limiter")
            return self._backend_down(base, progress, exc, why.LIMITER_UNAVAILABLE)
        action = plan(decision, max_countdown=self.config.max_countdown)
        if isinstance(action, Send):  # the limiter's clock says the hold is over: go
            return Go(due=action.at)
        tier = _tier_name(decision, action.tier) or f"{scope} hold"
        held = {"hold": scope, "smtp_reply": base.smtp_reply or hold.cause}
        if isinstance(action, Drop):
            dropped = base.but(
                status="dropped",
                reason=why.RATE_LIMITED,
                tier=tier,
                wait=action.wait,
                detail=f"{scope} held until {iso(hold.until)}: no slot within the kind's wait",
                **held,
            )
            log.info(
                "mail %s dropped: %s held until %s, no slot in time",
                mail.mail_id,
                scope,
                iso(hold.until),
                extra=log_fields(dropped),
            )
            return Finish(dropped)
        later = _booked(base, action, tier, progress, now)
        outcome = later.outcome.but(
            reason=why.HELD, detail=f"{scope} held until {iso(hold.until)}", **held
        )
        return replace(later, outcome=outcome)

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

    # 3. admit ------------------------------------------------------------------------------

    def _admit(self, mail: Prepared, progress: Progress) -> Go | Step:
        """Ask the limiter (with reservations) and plan: go now, wait for the booking, drop.

        The kind's ``max_wait`` counts from the request (``progress.requested_at``): a mail past
        that deadline is dropped ``expired``, and no booking reaches beyond it. A run that
        starts more than ``late_tolerance`` after its booked slot gives the slot back and asks
        again (:meth:`_rebook`), so late mails are spaced by the policy in real time.
        """
        now = self._clock()
        left = progress.requested_at + mail.kind.max_wait - now  # seconds the kind still allows
        if left < -self.config.late_tolerance:
            return self._expired(mail, progress, now)
        max_wait = min(max(left, 0.0), MAX_WAIT)
        late = False
        try:
            started = time.perf_counter()
            decision = self._acquire(mail, max_wait)
            self.metrics.decision(time.perf_counter() - started)
            if decision.allowed and now - decision.at > self.config.late_tolerance:
                late = True
                decision = self._rebook(mail, decision, max_wait, now)
        except (BackendUnavailable, Contended) as exc:
            return self._unanswered(mail, progress, exc)
        action = plan(decision, max_countdown=self.config.max_countdown)
        if isinstance(action, Send):
            return Go(due=action.at)
        tier = _tier_name(decision, action.tier)
        if isinstance(action, Drop):
            dropped = mail.base.but(
                reason=why.LATE if late else why.RATE_LIMITED,
                tier=tier,
                wait=action.wait,
                due=decision.at,
            )
            log.info(
                "mail %s dropped: rate limited by %s, wait %.3f s",
                mail.mail_id,
                tier,
                action.wait,
                extra=log_fields(dropped),
            )
            return Finish(dropped)
        return _booked(mail.base, action, tier, progress, now)

    def _unanswered(
        self, mail: Prepared, progress: Progress, exc: BackendUnavailable | Contended
    ) -> Go | Step:
        """No decision: the limiter is down (``fail_closed`` defers, ``fail_open`` sends
        unguarded) or the recipients were contended (deferred: the limiter works, so sending
        would break "never over", whatever ``fail_open`` says)."""
        if isinstance(exc, Contended):
            return self._backend_down(mail.base, progress, exc, why.CONTENDED)
        self.metrics.backend_down("limiter")
        if not self.config.fail_open:
            return self._backend_down(mail.base, progress, exc, why.LIMITER_UNAVAILABLE)
        log.warning(
            "mail %s: limiter unavailable, sending unguarded (fail_open)",
            mail.mail_id,
            extra=log_fields(mail.base),
        )
        return Go(due=None, guarded=False)

    def _rebook(self, mail: Prepared, slot: Decision, max_wait: float, now: float) -> Decision:
        """This run is late for its slot: give the slot back and ask the limiter again, now.

        The recipient's log then holds this mail at (about) the time it really leaves, and the
        mails booked after it keep their slots, so two mails that leave are never closer than
        the policy allows, whatever made this one late (an outage, a crash, a backlog).
        """
        self._give_back(mail)
        again = self._acquire(mail, max_wait)
        self.metrics.rebooked(mail.kind.name if mail.kind.name in self.kinds else UNKNOWN_KIND)
        log.info(
            "mail %s ran %.1f s after its slot: %s",
            mail.mail_id,
            now - slot.at,
            "sent now" if again.allowed else "booked again" if again.booked else "no slot in time",
            extra=log_fields(mail.base),
        )
        return again

    def _acquire(
        self, mail: Prepared, max_wait: float, not_before: float | None = None
    ) -> Decision:
        """The limiter's decision for ``mail``: every scope of a scoped limiter at once;
        ``not_before`` (a hold's end) books the earliest slot at or after it."""
        limiter = self.limiter
        if mail.more_keys:  # several recipients: one slot that suits them all
            return acquire_all(
                _Keyed(limiter, mail),
                [mail.limit_key, *mail.more_keys],
                mail_id=mail.mail_id,
                max_wait=max_wait,
                not_before=not_before,
            )
        return limiter.acquire(
            mail.limit_key,
            mail_id=mail.mail_id,
            max_wait=max_wait,
            tenant=mail.tenant,
            share=mail.kind.share,
            not_before=not_before,
        )

    def _give_back(self, mail: Prepared) -> bool:
        """Release ``mail``'s slot in the recipient's key, or in every scope's."""
        limiter = self.limiter
        if mail.more_keys:
            return release_all(
                _Keyed(limiter, mail), [mail.limit_key, *mail.more_keys], mail.mail_id
            )
        return limiter.release(mail.limit_key, mail.mail_id, tenant=mail.tenant)

    def _expired(self, mail: Prepared, progress: Progress, now: float) -> Finish:
        """``dropped`` / ``expired``: the kind's deadline, counted from the request, has passed."""
        deadline = progress.requested_at + mail.kind.max_wait
        dropped = mail.base.but(
            reason=why.EXPIRED,
            detail=f"{now - progress.requested_at:.1f} s after the request, kind "
            f"{mail.kind.name!r} allows {mail.kind.max_wait:g} s (deadline {iso(deadline)})",
        )
        log.info("mail %s dropped: expired", mail.mail_id, extra=log_fields(dropped))
        if progress.due:
            self._release(mail)  # the recipient keeps the slot this mail will not use
        return Finish(dropped)

    def _backend_down(
        self, base: Outcome, progress: Progress, exc: BackendUnavailable | Contended, reason: str
    ) -> Later:
        """Defer with doubling backoff while the limiter or the ledger is down (or contended)."""
        progress = replace(progress, limiter_failures=progress.limiter_failures + 1)
        countdown = self._backoff(progress.limiter_failures)
        waiting = base.but(status="deferred", reason=reason, wait=countdown, detail=str(exc))
        log.warning(
            "mail %s deferred %.1f s: %s",
            base.mail_id,
            countdown,
            {
                why.LEDGER_UNAVAILABLE: "ledger unavailable",
                why.CONTENDED: "recipients contended, no common slot",
            }.get(reason, "limiter unavailable (fail_closed)"),
            extra=log_fields(waiting),
        )
        return Later(countdown, waiting, progress)

    def _backoff(self, failures: int) -> float:
        return defaults.backoff(
            failures, first=self.config.retry_backoff, cap=self.config.max_countdown
        )

    # 4. send -------------------------------------------------------------------------------

    def _send(self, mail: Prepared, go: Go, progress: Progress) -> Step:
        """Send under the claim: sent, a transient failure to retry later, or failed for good."""
        base = mail.base if go.due is None else mail.base.but(due=go.due)
        try:
            message = self._message(mail)
        except InvalidMessage as exc:  # not expected: check_mail passed (needs_build_to_check)
            self._release(mail)
            return Finish(base.but(reason=why.INVALID, detail=str(exc)))
        try:
            receipt = self.transport.send(message)
        except PermanentSendError as exc:
            failed = failure(base, why.SMTP_PERMANENT, progress.attempts + exc.attempts, exc)
            self._suppress_if_gone(mail, exc)
            log.warning(
                "mail %s failed: permanent SMTP error %s",
                mail.mail_id,
                exc.code,
                extra=log_fields(failed.outcome),
            )
            return failed
        except TransientSendError as exc:
            reaction = classify(exc.code, exc.reply or "") if exc.code is not None else None
            if self.holds is not None and reaction is not None and reaction.hold_action:
                return self._throttled(mail, base, progress, exc, reaction)
            return self._transient(base, progress, exc)
        outcome = base.but(
            status="sent",
            reason=None,
            attempts=progress.attempts + receipt.attempts,
            smtp_code=receipt.code,
            smtp_reply=receipt.reply,
            sent_at=self._clock(),
            detail=None if go.guarded else UNGUARDED,
        )
        log.info("mail %s sent to %s", mail.mail_id, base.recipient, extra=log_fields(outcome))
        return Finish(outcome)

    def _suppress_if_gone(self, mail: Prepared, exc: PermanentSendError) -> None:
        """A hard bounce (the mailbox is gone) suppresses the recipient for ``suppress_for``."""
        if exc.code is None or classify(exc.code, exc.reply or "").action is not Action.SUPPRESS:
            return
        try:
            self.suppressions.suppress(
                mail.limit_key, seconds=self.config.suppress_for, cause=f"{exc.code} {exc.reply}"
            )
        except BackendUnavailable:
            self.metrics.backend_down("ledger")
            log.warning(
                "mail %s: could not suppress its recipient (ledger unavailable)", mail.mail_id
            )
            return
        log.warning(
            "mail %s: recipient %s suppressed for %.0f s after a hard bounce",
            mail.mail_id,
            mail.base.recipient,
            self.config.suppress_for,
            extra={"mail_id": mail.mail_id, "recipient": mail.base.recipient},
        )

    def _transient(self, base: Outcome, progress: Progress, exc: TransientSendError) -> Step:
        """Retry later with doubling backoff, or fail once the retries are used up."""
        attempts = progress.attempts + exc.attempts
        progress = replace(progress, attempts=attempts, send_failures=progress.send_failures + 1)
        if progress.send_failures > self.config.send_retries:
            failed = failure(base, why.RETRIES_EXHAUSTED, attempts, exc)
            log.warning(
                "mail %s failed: transient SMTP errors, retries exhausted",
                base.mail_id,
                extra=log_fields(failed.outcome),
            )
            return failed
        countdown = self._backoff(progress.send_failures)
        waiting = base.but(
            status="deferred",
            reason=why.SMTP_TRANSIENT,
            attempts=attempts,
            wait=countdown,
            smtp_code=exc.code,
            smtp_reply=exc.reply,
        )
        log.info(
            "mail %s: transient SMTP error %s, again in %.1f s",
            base.mail_id,
            exc.code,
            countdown,
            extra=log_fields(waiting),
        )
        return Later(countdown, waiting, progress)

    # 5. record -----------------------------------------------------------------------------

    def _settle(self, mail: Prepared, owner: str, step: Step, *, guarded: bool) -> Step:
        """The ledger's effects once this run holds the claim, in one place; the step to answer.

        Finished (sent or dropped) and failed mails are recorded, which drops the claim: final
        means final, a redelivered copy answers the recorded outcome. A failed mail first gives
        the recipient's slot back. A mail that runs again gives the claim back; if the ledger
        is down then, the next run may take the claim over (``Progress.stale_owner``).
        A backend that is down here is logged and counted, never raised: the step stands.
        """
        if isinstance(step, Fail) and guarded:
            self._release(mail)
        if not isinstance(step, Later):
            self._record(step.outcome)
            return step
        try:
            self.ledger.unclaim(mail.mail_id, owner)
        except BackendUnavailable:
            self.metrics.backend_down("ledger")
            log.warning(
                "mail %s: claim left to its next run (ledger unavailable)",
                mail.mail_id,
                extra={"mail_id": mail.mail_id},
            )
            return replace(step, progress=replace(step.progress, stale_owner=owner))
        return step

    def _record(self, outcome: Outcome) -> None:
        try:
            self.ledger.record(outcome)
        except BackendUnavailable:
            # The outcome stands; only the marker is missing. A redelivered copy would find the
            # claim (until its lease ends): log loudly rather than fail a finished mail.
            self.metrics.backend_down("ledger")
            log.error(
                "mail %s %s but its outcome could not be recorded (ledger unavailable)",
                outcome.mail_id,
                outcome.status,
                extra=log_fields(outcome),
            )

    def _release(self, mail: Prepared) -> None:
        """Give a failed mail's slot back: the recipient should not pay for our failure."""
        try:
            self._give_back(mail)
        except BackendUnavailable:
            self.metrics.backend_down("limiter")
            log.warning(
                "mail %s: could not release its slot (limiter unavailable)",
                mail.mail_id,
                extra={"mail_id": mail.mail_id},
            )


@dataclass(frozen=True)
class _Known:
    """What :meth:`Guard._read_together` read: the suppression and the (sender, recipient)
    holds in force, as the separate reads would answer them."""

    suppression: Suppression | None
    holds: tuple[Hold | None, Hold | None]


class _Keyed:
    """The guard's limiter seen as :mod:`mailer.limits.multi` wants it: one key at a time, the
    mail's tenant and kind share applied on a scoped limiter."""

    def __init__(self, limiter: Limiter, mail: Prepared) -> None:
        self.limiter = limiter
        self.mail = mail
        self.url = getattr(limiter, "url", "limiter")

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


def _booked(
    base: Outcome, action: Defer, tier: str | None, progress: Progress, now: float
) -> Later:
    """A booked mail: run again at its slot (or hop towards it; a hop is not a new deferral).

    The run is timed on the limiter's clock (``eta``: its now, ``due - wait``, plus the
    countdown). A run that came back for this very slot while the limiter says it is not due
    yet was started early by a worker whose clock is ahead: it waits the limiter's remaining
    ``countdown`` on its own clock instead (an ``eta`` would look due to it again at once).
    """
    eta: float | None = action.due - action.wait + action.countdown
    new_booking = action.due != progress.due
    if not new_booking and now >= action.due:
        eta = None
        log.warning(
            "mail %s ran %.3f s before its slot by the limiter's clock: this worker's clock is "
            "ahead of the limiter's",
            base.mail_id,
            action.wait,
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
        status="deferred",
        reason=why.BOOKED,
        tier=tier,
        wait=action.wait,
        due=action.due,
        deferrals=progress.deferrals,
    )
    if new_booking:  # one line per booking; hops towards it are quiet
        log.info(
            "mail %s deferred %.1f s to %s by %s",
            base.mail_id,
            action.wait,
            iso(action.due),
            tier or "the mails booked before it",
            extra=log_fields(waiting),
        )
    return Later(action.countdown, waiting, progress, eta)


def _cause_label(code: int | None, reply: str | None) -> str:
    """A bounded metrics label for a reply: its code and enhanced status (``454 4.7.0``)."""
    status = enhanced_status(reply or "")
    return f"{code} {status}" if status else str(code)


def _tier_name(decision: Decision, tier: object) -> str | None:
    """The binding tier as outcomes show it: ``1/60s``, or with its scope, ``sender 14/1s``."""
    if tier is None:
        return None
    scope = decision.scope
    return f"{scope} {tier}" if scope and scope != "recipient" else str(tier)
