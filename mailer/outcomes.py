"""What became of a mail: an :class:`Outcome`, plain data stored in the Celery result backend."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

Status = Literal["sent", "deferred", "dropped", "failed"]

#: Reasons a mail is dropped or failed, or waits.
INVALID = "invalid"
RATE_LIMITED = "rate_limited"
#: Past its kind's deadline (``max_wait`` counted from the request): never sent.
EXPIRED = "expired"
#: Ran late, asked again, and the next slot is past its kind's deadline.
LATE = "late"
BOOKED = "booked"
LIMITER_UNAVAILABLE = "limiter_unavailable"
LEDGER_UNAVAILABLE = "ledger_unavailable"
#: A message to several recipients found no common slot this run (others kept moving them).
CONTENDED = "contended"
POISON = "poison"
SUPPRESSED = "suppressed"
#: A bulk kind's mail to a recipient who unsubscribed from the sender's bulk kinds.
UNSUBSCRIBED = "unsubscribed"
#: A bulk kind's mail waiting while its sender is paused by its reputation (a rate too high).
REPUTATION = "reputation"
#: Booked after a hold (the server asked us to slow down): ``hold`` names it.
HELD = "held"
IN_FLIGHT = "in_flight"
#: A stale copy of a run whose mail another run already carried on (a watchdog's copy of a
#: countdown that ran late, a redelivered copy): it ended without a trace (nothing stored).
SUPERSEDED = "superseded"
SMTP_TRANSIENT = "smtp_transient"
SMTP_PERMANENT = "smtp_permanent"
RETRIES_EXHAUSTED = "retries_exhausted"
#: Cancelled by an operator (``mailguard cancel``) before it was sent: never sent.
CANCELLED = "cancelled"

#: The fields :meth:`Outcome.as_waiting_dict` keeps whatever their value.
_ALWAYS = frozenset({"status", "mail_id", "kind"})


@dataclass(frozen=True)
class Outcome:
    """One mail's state. Times are epoch seconds, ``wait`` seconds.

    ``recipient`` is a keyed hash of the normalised address, never the address. ``tier`` is the
    binding tier as text (``"1/1m"``). ``attempts`` counts SMTP tries over all runs,
    ``deferrals`` the times the task was put off. ``smtp_code`` / ``smtp_reply`` are the last
    server reply (addresses masked); through a provider's API (``provider``: ``postmark``,
    ``ses``) ``smtp_code`` stays None, ``smtp_reply`` is the provider's answer and
    ``provider_message_id`` the id it gave the mail. ``hold`` is set on a mail booked after a hold:
    ``sender`` or ``recipient``; its ``smtp_code`` / ``smtp_reply`` are then the reply that
    started the hold and ``due`` the slot booked after it. ``admitted_at`` (a ``sent`` mail's)
    is when the limiter admitted it, on the limiter's clock: never before ``due``, and where
    the policy's spacing is promised (two mails to one recipient admitted at least the
    spacing less ``MAILGUARD_LATE_TOLERANCE`` apart); ``sent_at`` is after the server took
    it. None for a mail sent unguarded (``fail_open``).
    """

    status: Status
    mail_id: str
    kind: str
    reason: str | None = None
    recipient: str | None = None
    tier: str | None = None
    wait: float | None = None
    due: float | None = None
    attempts: int = 0
    deferrals: int = 0
    smtp_code: int | None = None
    smtp_reply: str | None = None
    provider: str | None = None
    provider_message_id: str | None = None
    message_id: str | None = None
    detail: str | None = None
    decided_at: float | None = None
    sent_at: float | None = None
    hold: str | None = None
    admitted_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``AsyncResult(mail_id).get()`` returns). Every field is a
        scalar: a plain copy, not ``dataclasses.asdict``'s deep one (a tenth of the cost)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def as_waiting_dict(self) -> dict[str, Any]:
        """The compact form stored while a mail waits (the ``DEFERRED`` state's meta): every
        field of :meth:`as_dict` but those at their default (None; 0 for the counters), about
        half of them, so a waiting mail's result record is about 250 B smaller. ``status``,
        ``mail_id`` and ``kind`` are always in it. :meth:`from_dict` reads it back whole (a
        missing field is its default); final outcomes keep every field."""
        fields = self.__dataclass_fields__
        return {
            name: value
            for name, value in self.as_dict().items()
            if name in _ALWAYS or value != fields[name].default
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        """The inverse of :meth:`as_dict` and :meth:`as_waiting_dict` (a missing field is its
        default); unknown keys are ignored."""
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})

    def but(self, **changes: Any) -> Outcome:
        """A copy with ``changes``."""
        return replace(self, **changes)
