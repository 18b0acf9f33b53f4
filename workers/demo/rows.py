"""One mail of the demo's run (:class:`Row`) and the newsletter burst (:class:`Burst`).

A row follows its mail through the Celery states the run reads (:mod:`mailer.steps`: DEFERRED,
then SUCCESS or FAILURE) into the words the table shows: planned, queued, deferred, sent,
dropped, failed. Times are epoch seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mailer.steps import DEFERRED, FAILURE, FINAL_STATES
from workers.demo.story import Planned


@dataclass
class Row:
    """One mail of the run and what became of it. Times are epoch seconds."""

    n: int
    planned: Planned
    address: str
    at: float  # when it is enqueued, seconds after the start (after --speed)
    mail_id: str = ""
    enqueued_at: float | None = None
    state: str = "planned"  # planned, queued, deferred, sent, dropped, failed
    booked: float | None = None
    tier: str | None = None
    tiers: list[str] = field(default_factory=list)  # every tier that booked it, in order
    wait: float | None = None
    due: float | None = None
    sent_at: float | None = None
    admitted_at: float | None = None  # when the limiter admitted it, on the limiter's clock
    reason: str | None = None
    deferrals: int = 0
    rebooked: bool = False  # came back late for its slot and was booked again (or sent)

    @property
    def settled(self) -> bool:
        return self.state in ("sent", "dropped", "failed")

    @property
    def lateness(self) -> float | None:
        """``sent_at - due``: how late against its slot (its booking when it was deferred)."""
        if self.sent_at is None or self.due is None:
            return None
        return self.sent_at - self.due

    @property
    def waited(self) -> float | None:
        """The booked wait; for a deferral seen only by its outcome, from enqueue to its slot."""
        if self.wait is not None or self.booked is None or self.enqueued_at is None:
            return self.wait
        return self.booked - self.enqueued_at

    def update(self, state: str, meta: Any) -> None:
        """Take a Celery state and its outcome meta
        (:func:`workers.waiting.outcomes.read_state`)."""
        if state == FAILURE and not isinstance(meta, Mapping):
            meta = {}  # an exception other than MailFailed: failed, no outcome to show
        if not isinstance(meta, Mapping):
            return
        if state == DEFERRED:
            self._deferred(meta)
        elif state in FINAL_STATES:
            self._settled(state, meta)

    def _deferred(self, meta: Mapping[str, Any]) -> None:
        self.state = "deferred"
        due = _float(meta.get("due"))
        if self.booked is not None and due is not None and due != self.booked:
            self.rebooked = True
        self.booked = due
        self.tier = meta.get("tier") or self.tier
        if self.tier and self.tier not in self.tiers:
            self.tiers.append(self.tier)
        self.wait = _float(meta.get("wait"))

    def _settled(self, state: str, meta: Mapping[str, Any]) -> None:
        status = str(meta.get("status") or ("failed" if state == FAILURE else "sent"))
        self.state = status if status in ("sent", "dropped") else "failed"
        self.reason = meta.get("reason")
        self.due = _float(meta.get("due"))
        self.sent_at = _float(meta.get("sent_at"))
        self.admitted_at = _float(meta.get("admitted_at"))
        self.deferrals = int(meta.get("deferrals") or 0)
        if self.booked is not None and (self.deferrals > 1 or self.due != self.booked):
            self.rebooked = True
        if self.state == "dropped":
            self.tier = meta.get("tier")
            self.wait = _float(meta.get("wait"))
        elif self.deferrals and self.booked is None:
            # Its deferred state came and went between two looks: the slot it was sent at is
            # its booking; the wait is counted from when it was enqueued.
            self.booked = self.due

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "mail_id": self.mail_id,
            "recipient": self.planned.to,
            "kind": self.planned.kind,
            "enqueued_at": self.enqueued_at,
            "status": self.state,
            "deferred": self.booked is not None,
            "booked": self.booked,
            "tier": self.tier,
            "tiers": list(self.tiers),
            "wait": self.waited,
            "due": self.due,
            "sent_at": self.sent_at,
            "admitted_at": self.admitted_at,
            "lateness": self.lateness,
            "reason": self.reason,
            "rebooked": self.rebooked,
        }


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


@dataclass
class Burst:
    """The newsletter burst: its readers, when it was queued, and the code mail queued behind
    it (dee's), to see which went first at the SMTP server. Times are epoch seconds."""

    at: float  # when it is queued, seconds after the start (after --speed)
    readers: list[str]
    code_address: str
    enqueued_at: float | None = None
    received: dict[str, float] = field(default_factory=dict)  # first receipt per address
    #: Readers who had not received the newsletter when the code mail was queued: the most
    #: the code mail can overtake (the others left before it existed).
    waiting_at_code: int | None = None

    @property
    def done(self) -> bool:
        """Every reader received the newsletter (or it was never queued)."""
        return self.enqueued_at is None or all(r in self.received for r in self.readers)

    def summary(self) -> dict[str, Any]:
        """Size, when queued, how long the code mail took, how many readers it went ahead of."""
        code = self.received.get(self.code_address)
        ahead = (
            None
            if code is None
            else sum(self.received.get(r, code + 1) > code for r in self.readers)
        )
        return {
            "size": len(self.readers),
            "enqueued_at": self.enqueued_at,
            "code_after": None
            if code is None or self.enqueued_at is None
            else code - self.enqueued_at,
            "code_ahead_of": ahead,
            "waiting_at_code": self.waiting_at_code,
            "took": (
                max(self.received[r] for r in self.readers) - self.enqueued_at
                if self.enqueued_at is not None and self.done
                else None
            ),
        }
