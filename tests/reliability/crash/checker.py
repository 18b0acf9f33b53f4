"""The independent checker of the crash tests: what every mail must be after any crash.

It reads only what an outsider can: the SMTP server's log (each message by its Message-ID and
when it arrived, on the server's clock) and the outcome each mail's result recorded. Five
promises, each mail and each recipient:

1. **once**: every ``sent`` mail arrived exactly once. The one window no protocol closes, the
   SMTP accept-then-drop (the server accepted the data, the process died before anything was
   recorded), may make it twice: a test at that point names it (``accept_then_drop``) and the
   checker counts the copies instead of failing.
2. **never early**: the copy the outcome records (the last) arrived no earlier than its slot
   (the outcome's ``due``); an accept-then-drop copy went at the slot of the run that died.
3. **spacing**: a recipient's mails were admitted no closer than the policy's tiers allow, less
   ``MAILGUARD_LATE_TOLERANCE``, on the limiter's clock (the ``sent`` outcome's
   ``admitted_at``). An outcome without that field is judged on the server's arrival times
   instead, with :data:`LATENCY` for the admission-to-arrival time (and the report says so).
4. **max wait**: sent within its kind's max wait of its enqueue, or ended ``dropped``
   (``expired`` among the reasons a drop may give).
5. **late after a restart**: the k-th copy a recipient received after the clean worker
   started arrived at most the claim lease + :data:`RESTART_SLACK` after the k-th earliest
   moment the policy allowed (:func:`restart_slots`: what arrived before the start counted,
   an accept-then-drop copy counted as the mail it copies, nothing before the start).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from devservers.smtp_server import SmtpTestServer
from mailer.mail.message import message_id

SENDER = "mailguard@example.org"
#: Seconds a copy may arrive before its slot: the worker, Redis and the SMTP server share the
#: machine's clock; this is the rounding of the recorded times (milliseconds).
EARLY_SLACK = 0.05
#: Seconds between a mail's admission and its arrival at the SMTP server (building the
#: message, connecting, RCPT, DATA): the allowance of tests/reliability/test_drain_worker.py, used
#: only when an outcome carries no ``admitted_at``.
LATENCY = 0.5
#: Seconds past the claim lease a mail may arrive after the clean worker started: the promise.
RESTART_SLACK = 3.0


@dataclass(frozen=True)
class Mail:
    """One mail a test enqueued: its id, recipient, kind, and when (the test's clock, epoch s)."""

    mail_id: str
    to: str
    enqueued_at: float
    kind: str = "default"


@dataclass(frozen=True)
class Promise:
    """What the stack under test promised: the recipient tiers ((count, seconds) each), the
    late tolerance, the claim lease and each kind's max wait (seconds)."""

    tiers: tuple[tuple[int, float], ...]
    late_tolerance: float
    claim_lease: float
    max_waits: dict[str, float]


@dataclass
class Report:
    """What the checker found beyond the assertions: copies in the accept-then-drop window,
    seconds late after the restart per mail, and where spacing was judged."""

    extra_copies: int = 0
    late: dict[str, float] = field(default_factory=dict)
    spacing_judged_on: str = "admitted_at"

    def line(self) -> str:
        worst = max(self.late.values(), default=0.0)
        return (
            f"{len(self.late)} mails; accept-then-drop copies {self.extra_copies}; latest "
            f"{worst:.2f} s after the earliest moment after the restart "
            f"({', '.join(f'{v:.2f}' for v in self.late.values())}); "
            f"spacing judged on {self.spacing_judged_on}"
        )


def arrivals(smtp: SmtpTestServer) -> dict[str, list[float]]:
    """Arrival times (server clock, epoch s) by Message-ID."""
    got: dict[str, list[float]] = {}
    for delivered in smtp.delivered:
        got.setdefault(str(delivered.message["Message-ID"]), []).append(delivered.received_at)
    return got


def check(
    mails: list[Mail],
    outcomes: dict[str, dict[str, Any]],
    smtp: SmtpTestServer,
    promise: Promise,
    *,
    restart: float,
    accept_then_drop: bool = False,
) -> Report:
    """Assert the five promises for ``mails`` (``outcomes`` by mail id: each one's final
    outcome dict); ``restart``: when the clean worker was ready (epoch s)."""
    report = Report()
    seen = arrivals(smtp)
    admitted: dict[str, list[float]] = {}
    sent: dict[str, list[tuple[float, float]]] = {}  # (enqueued, arrived) of every copy
    for mail in mails:
        outcome = outcomes[mail.mail_id]
        times = sorted(seen.get(message_id(mail.mail_id, SENDER), []))
        if outcome["status"] != "sent":
            _check_unsent(mail, outcome, times)
            continue
        _check_once(mail, times, accept_then_drop, report)
        first, recorded = times[0], times[-1]  # the copy the outcome records is the last
        slot = outcome.get("due") or mail.enqueued_at
        early = slot - recorded
        assert early <= EARLY_SLACK, f"{mail.mail_id} arrived {early:.3f} s early"
        max_wait = promise.max_waits[mail.kind]
        assert first - mail.enqueued_at <= max_wait + promise.late_tolerance, (
            f"{mail.mail_id} arrived {first - mail.enqueued_at:.2f} s after its enqueue, past "
            f"its kind's max wait {max_wait:g} s"
        )
        sent.setdefault(mail.to, []).extend((mail.enqueued_at, t) for t in times)
        when = outcome.get("admitted_at")
        if when is None:
            report.spacing_judged_on = "SMTP arrival (no admitted_at in the outcome)"
            when = first
        admitted.setdefault(mail.to, []).append(float(when))
    allowance = promise.late_tolerance
    if report.spacing_judged_on != "admitted_at":
        allowance += LATENCY
    for to, times in admitted.items():
        _check_spacing(to, sorted(times), promise.tiers, allowance)
    for to, pairs in sent.items():
        _check_late(to, pairs, promise, restart, report)
    return report


def _check_late(
    to: str, pairs: list[tuple[float, float]], promise: Promise, restart: float, report: Report
) -> None:
    """The k-th copy ``to`` received after ``restart`` at most the claim lease +
    :data:`RESTART_SLACK` after the k-th of :func:`restart_slots`. ``pairs``: (enqueued at,
    arrived at) of every copy received, an accept-then-drop copy with its mail's enqueue."""
    before = [arrived for _, arrived in pairs if arrived < restart]
    after = sorted((at, arrived) for at, arrived in pairs if arrived >= restart)
    ideal = restart_slots(before, [at for at, _ in after], restart, promise.tiers)
    for k, (slot, arrived) in enumerate(zip(ideal, sorted(a for _, a in after), strict=True)):
        late = arrived - slot
        report.late[f"{to}#{len(before) + k}"] = late
        assert late <= promise.claim_lease + RESTART_SLACK, (
            f"{to}: copy {len(before) + k + 1} arrived {late:.2f} s after the earliest moment "
            f"the policy allowed after the restart: more than the claim lease "
            f"{promise.claim_lease:g} s + {RESTART_SLACK:g} s"
        )


def restart_slots(
    before: list[float],
    enqueued: list[float],
    restart: float,
    tiers: tuple[tuple[int, float], ...],
) -> list[float]:
    """The earliest moment the policy allows each copy still to come after ``restart``, taken
    in enqueue order: never before ``restart`` (no worker ran), each spaced by every tier from
    the copies that arrived ``before`` it and from the earlier ones of these (epoch s). A copy
    the crash made (accept-then-drop) counts like any other: the recipient receives it."""
    slots = sorted(before)
    out: list[float] = []
    for at in sorted(enqueued):
        slot, moved = max(at, restart), True
        while moved:
            moved = False
            for count, window in tiers:
                inside = sorted(s for s in slots if s > slot - window)
                if len(inside) >= count:
                    slot, moved = inside[len(inside) - count] + window, True
        slots.append(slot)
        out.append(slot)
    return out


def _check_once(mail: Mail, times: list[float], accept_then_drop: bool, report: Report) -> None:
    if accept_then_drop and len(times) == 2:
        report.extra_copies += 1
        return
    assert len(times) == 1, f"{mail.mail_id} arrived {len(times)} times: {times}"


def _check_unsent(mail: Mail, outcome: dict[str, Any], times: list[float]) -> None:
    """A mail not sent must have ended ``dropped`` (never ``failed`` here: the SMTP server
    accepts everything) and must not have arrived."""
    assert outcome["status"] == "dropped", f"{mail.mail_id} ended {outcome}"
    assert times == [], f"{mail.mail_id} ended dropped ({outcome.get('reason')}) but arrived"


def _check_spacing(
    to: str, times: list[float], tiers: tuple[tuple[int, float], ...], allowance: float
) -> None:
    """No ``count + 1`` admissions of one recipient within a tier's window, less ``allowance``."""
    for count, window in tiers:
        for first, last in zip(times, times[count:], strict=False):
            assert last - first >= window - allowance, (
                f"{to}: {count + 1} mails within {last - first:.3f} s under {count}/{window:g}s "
                f"(allowance {allowance:g} s): {times}"
            )
