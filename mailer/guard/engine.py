"""The guard: one run of one mail, from its raw request to a :data:`~mailer.steps.Step`.

A run is a short pipeline; each stage is a small object in its own module that returns plain
data, and the engine only passes it on:

1. **validate** (:mod:`mailer.guard.validate`): a :class:`Prepared` mail, or ``Finish``
   (``dropped`` / ``invalid``).
2. **claim** (:mod:`mailer.guard.claim`): one atomic ledger ``begin`` on the mail id: claimed,
   or the recorded outcome (a repeat), or ``Later`` (another run holds it; the ledger is down).
   Where the parts share one Redis, the gates' reads and the plain decision ride on the same
   script call (:mod:`mailer.guard.front`): one round trip before sending, one after.
3. **gates** (:mod:`mailer.guard.gates`): each gate's ``before_admit`` hook, in order:
   suppression (:mod:`~mailer.guard.gates.suppression`), the bulk kinds' unsubscribe and
   reputation and the senders' warm-up plans (:mod:`~mailer.guard.gates.bulk`), the
   transport's hold (:mod:`~mailer.guard.gates.transport`), then holds
   (:mod:`~mailer.guard.gates.holds`).
4. **admit** (:mod:`mailer.guard.admission`, booking through :mod:`mailer.guard.booking`):
   :class:`Admitted` (send now), or ``Later`` (booked; limiter down), or ``Finish``
   (``dropped``).
5. **send** (:mod:`mailer.guard.sending`): ``Finish`` (``sent``), or a refusal that the gates'
   ``on_send_error`` hooks answer first (a hold may book the mail again: the engine then sends
   again, in a loop), then the default rule (``Later`` with backoff, or ``Fail``).
6. **settle** (:mod:`mailer.guard.settle`): record a final outcome, or give the claim back to
   run again; a failed mail gives its slot back.

The words of each result (``plan`` → ``Step`` → outcome → Celery state) are in
:mod:`mailer.steps`. The guard never imports Celery; ``workers/tasks.py`` carries a step out.
Build a guard with :mod:`mailer.factory` (``build_guard``, or ``memory_guard`` in one process).
"""

from __future__ import annotations

import uuid

from mailer import outcomes as why
from mailer.clock import Clock
from mailer.crashpoints import crash_point
from mailer.errors import BackendUnavailable
from mailer.guard.admission import Admission
from mailer.guard.booking import Booking
from mailer.guard.claim import Claim
from mailer.guard.data import Admitted, GuardConfig, MailRequest, Prepared, Refused
from mailer.guard.front import Ahead, Front, asks_the_same
from mailer.guard.gates import Gate, read_together
from mailer.guard.gates.bulk import bulk_gates, sent_recorder
from mailer.guard.gates.holds import HoldsGate
from mailer.guard.gates.suppression import SuppressionGate
from mailer.guard.gates.transport import TransportGate
from mailer.guard.sending import Sending
from mailer.guard.settle import Settle
from mailer.guard.validate import Validator
from mailer.limits.limiter import Limiter
from mailer.mail.kinds import Kinds
from mailer.mail.transports.base import Transport
from mailer.metrics import UNKNOWN_KIND, Metrics
from mailer.records.holds import Holds
from mailer.records.ledger import Ledger
from mailer.records.reputation import Reputation
from mailer.records.suppression import Suppressions
from mailer.records.warmup import Warmup
from mailer.steps import Fail, Finish, Later, Progress, Step
from mailer.unsubscribe import Unsubscribe

__all__ = ["Fail", "Finish", "Guard", "GuardConfig", "Later", "MailRequest", "Progress", "Step"]


class Guard:
    """Carries one mail through validate, claim, gates, admit, send, settle. Thread-safe if its
    parts are. Never raises for bad input: that is a ``dropped`` outcome.

    Every part is given (:mod:`mailer.factory` builds them); ``holds`` None turns holds off.
    ``kinds`` and ``metrics`` may be replaced on a built guard (the pipeline is wired again).
    """

    def __init__(
        self,
        limiter: Limiter,
        ledger: Ledger,
        transport: Transport,
        *,
        suppressions: Suppressions,
        holds: Holds | None,
        kinds: Kinds,
        config: GuardConfig,
        clock: Clock,
        metrics: Metrics,
        unsubscribe: Unsubscribe | None = None,
        reputation: Reputation | None = None,
        warmup: Warmup | None = None,
    ) -> None:
        self.limiter = limiter
        self.ledger = ledger
        self.transport = transport
        #: Addresses not to contact (hard bounces).
        self.suppressions = suppressions
        #: Holds after throttling replies (:mod:`mailer.records.holds`); None: holds are off.
        self.holds = holds
        #: Bulk kinds' one-click unsubscribe and the sender reputation; None: off.
        self.unsubscribe = unsubscribe
        self.reputation = reputation
        #: Senders' warm-up plans (:mod:`mailer.records.warmup`); None: off.
        self.warmup = warmup
        self.config = config
        self._clock = clock
        self._kinds = kinds
        self._metrics = metrics
        self._wire()

    @property
    def kinds(self) -> Kinds:
        return self._kinds

    @kinds.setter
    def kinds(self, kinds: Kinds) -> None:
        self._kinds = kinds
        self._wire()

    @property
    def metrics(self) -> Metrics:
        """Where each run is counted (:mod:`mailer.metrics`); ``NO_METRICS`` counts nothing."""
        return self._metrics

    @metrics.setter
    def metrics(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._wire()

    def _wire(self) -> None:
        """The pipeline's stages, built from the parts."""
        config, clock, metrics = self.config, self._clock, self._metrics
        booking = Booking(self.limiter, config, clock, metrics)
        self._validator = Validator(self._kinds, config, clock, booking.recipient_key)
        claim = Claim(self.ledger, config, metrics, booking.release)
        suppression = SuppressionGate(self.suppressions, config, metrics)
        gates: list[Gate] = [suppression]
        gates += bulk_gates(self.unsubscribe, self.reputation, config, metrics, self.warmup)
        self._transport_gate: TransportGate | None = None
        if self.holds is not None:  # the transport's hold first: a TLS refusal holds no sender
            self._transport_gate = TransportGate(self.holds.transport, booking, config, metrics)
            gates += [self._transport_gate, HoldsGate(self.holds, booking, config, metrics)]
        self._gates = tuple(gates)
        self._front = Front(claim, booking, self._gates)
        self._admission = Admission(booking, config, self._kinds, metrics)
        # booking.stamp: sent_at is compared with due (the limiter's clock)
        self._sending = Sending(
            self.transport, booking, config, booking.stamp, suppression.suppress_refused
        )
        self._settle = Settle(self.ledger, metrics, booking.release, patience=config.claim_lease)
        self._settle.record_sent = sent_recorder(self.ledger, self.reputation, metrics)

    def process(self, request: MailRequest, progress: Progress | None = None) -> Step:
        """One run of one mail, counted in the metrics."""
        step, repeated = self._run(request, progress or Progress())
        kind = step.outcome.kind
        label = kind if kind in self._kinds else UNKNOWN_KIND
        hop = (
            isinstance(step, Later)
            and progress is not None
            and step.progress.deferrals == progress.deferrals
            and step.outcome.reason == why.BOOKED
        )
        if repeated:
            self._metrics.repeat(label)
        elif not hop:  # a hop towards the same booked slot is not another deferral
            self._metrics.record(step.outcome, label)
            first_due = progress.first_due if progress else 0.0
            sent_at = step.outcome.sent_at
            if step.outcome.status == "sent" and sent_at is not None and first_due:
                self._metrics.after_first_slot(label, sent_at - first_due)
        return step

    def _run(self, request: MailRequest, progress: Progress) -> tuple[Step, bool]:
        """The step, and whether the mail had already finished (a repeated run)."""
        mail = self._validator.validate(request, progress)
        if not isinstance(mail, Prepared):
            return mail, False
        owner = uuid.uuid4().hex
        seen = 0.0 if progress.first_seen else self._now()  # the kind's deadline counts from here
        ahead = self._front.begin(mail, owner, progress, seen)
        if not isinstance(ahead.held, Progress):
            return ahead.held, not isinstance(ahead.held, Later)
        progress = ahead.held
        crash_point("claimed")
        mail, passed = self._pass_gates(mail, progress, ahead)
        if not isinstance(passed, Admitted):
            return self._settle.settle(mail, owner, passed, guarded=False), False
        step, admitted = self._deliver(mail, passed, progress)
        return self._settle.settle(mail, owner, step, guarded=admitted.guarded), False

    def _now(self) -> float:
        """Now on the limiter's clock (no round trip: :meth:`Limiter.now`), for a first run's
        ``first_seen``; 0 when the limiter was never reached (the admission that follows finds
        the limiter down too)."""
        try:
            return self.limiter.now()
        except BackendUnavailable:
            return 0.0

    def _pass_gates(
        self, mail: Prepared, progress: Progress, ahead: Ahead
    ) -> tuple[Prepared, Admitted | Step]:
        """Each gate's ``before_admit`` (with the values read with the claim, else read
        together now), then admission (with the decision that rode on the claim, if any): the
        mail as the gates left it, and :class:`Admitted` or the step to answer."""
        decided = ahead.decided
        every = ahead.raws if ahead.raws is not None else read_together(self._gates, mail)
        for gate, raws in zip(self._gates, every, strict=True):
            passed = gate.before_admit(mail, progress, raws)
            if decided is not None and not asks_the_same(mail, passed):
                self._front.undo(mail)  # decided for the mail as it was: its slot back
                decided = None
            if not isinstance(passed, Prepared):
                return mail, passed
            mail = passed
        return mail, self._admission.admit(mail, progress, decided)

    def _deliver(
        self, mail: Prepared, admitted: Admitted, progress: Progress
    ) -> tuple[Step, Admitted]:
        """Send; a refusal goes to the gates' ``on_send_error`` hooks, then the default rule.
        A gate that books the mail again with its slot now makes the loop send again. Returns
        the step and the admission the last send went under."""
        while True:
            sent = self._sending.send(mail, admitted, progress)
            if not isinstance(sent, Refused):
                if self._transport_gate is not None:
                    self._transport_gate.on_sent(mail, sent)  # a probe accepted lifts the hold
                return sent, admitted
            answer = self._on_send_error(mail, sent)
            if not isinstance(answer, Admitted):
                return answer, admitted
            admitted, progress = answer, sent.progress

    def _on_send_error(self, mail: Prepared, refused: Refused) -> Admitted | Step:
        for gate in self._gates:
            answer = gate.on_send_error(mail, refused)
            if answer is not None:
                return answer
        return self._sending.after_refusal(refused)
