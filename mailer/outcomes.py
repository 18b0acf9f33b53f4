"""What became of a mail: an :class:`Outcome`, plain data stored in the Celery result backend."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, replace
from typing import Any, Literal

Status = Literal["sent", "deferred", "dropped", "failed"]

#: Reasons a mail is dropped or failed, or waits.
INVALID = "invalid"
RATE_LIMITED = "rate_limited"
#: Past its kind's deadline, counted from when the guard first saw it: ``max_wait`` for a mail
#: never tried, its kind's lifetime for one the relay refused for a time (then with the last
#: reply in ``smtp_code`` / ``smtp_reply``): never sent.
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
#: Waiting for the next day of its sender's warm-up plan (the day's allowance is used).
WARMUP = "warmup"
#: Booked after a hold (the server asked us to slow down): ``hold`` names it.
HELD = "held"
IN_FLIGHT = "in_flight"
#: A stale copy of a run whose mail another run already carried on (a watchdog's copy of a
#: countdown that ran late, a redelivered copy): it ended without a trace (nothing stored).
SUPERSEDED = "superseded"
SMTP_TRANSIENT = "smtp_transient"
SMTP_PERMANENT = "smtp_permanent"
#: Cancelled by an operator (``mailguard cancel``) before it was sent: never sent.
CANCELLED = "cancelled"
#: A ``sent`` mail the relay took for some recipients and refused for others at ``RCPT``:
#: ``refused`` names each refused one.
PARTIAL = "partial"

#: The fields :meth:`Outcome.as_waiting_dict` never stores: ``message_id`` is derived again
#: when the mail is sent; the ``recipient`` key is what the schedule's entry of the waiting mail
#: already holds (its address, hashed again by ``mailguard outcome``:
#: :mod:`workers.waiting.cancelling`).
_UNSTORED = frozenset({"message_id", "recipient"})
#: What a waiting mail's record leaves out when the value is this (and the mail id when it is
#: the task id): :meth:`Outcome.as_waiting_dict`.
_WAITING: dict[str, Any] = {"status": "deferred", "kind": "default", "deferrals": 1}
#: How far (seconds) a waiting mail's ``decided_at`` may be from ``due - wait`` (the limiter's
#: clock at the decision) and be left out: the worker's clock read a few ms apart.
_DECIDED_SLACK = 0.05


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
    it. None for a mail sent unguarded (``fail_open``). ``refused`` (a ``sent`` mail's, reason
    ``partial``) has one dict per recipient the relay refused at ``RCPT`` while it took the mail
    for the others: ``recipient`` (its keyed hash, as above), ``code``, ``reply`` (addresses
    masked), ``suppressed`` (a hard bounce: the address is suppressed) and ``retry`` (a
    temporary refusal: the mail id of the copy sent to that recipient alone, else None).
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
    refused: tuple[dict[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``AsyncResult(mail_id).get()`` returns). Every field but
        ``refused`` is a scalar: a plain copy, not ``dataclasses.asdict``'s deep one (a tenth of
        the cost); ``refused`` is a list of new dicts."""
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        values["refused"] = [dict(entry) for entry in self.refused]
        return values

    def as_waiting_dict(self, task_id: str | None = None) -> dict[str, Any]:
        """The compact form of a ``deferred`` outcome, stored while the mail waits (the meta of
        task ``task_id``'s ``DEFERRED`` state): only what a reader cannot tell otherwise. Left
        out: every field at its default (None; 0 for ``attempts``), about half of them;
        ``status`` (``deferred``: the state says it); ``mail_id`` when it is ``task_id`` (the
        record's own id); ``kind`` when it is ``default``; ``deferrals`` when it is 1 (a booked
        mail's first wait); ``decided_at`` when it is
        ``due - wait`` within 50 ms (the limiter's clock at the decision, which is what it
        reads back as, to the millisecond); ``message_id`` (derived from the mail id and the
        sender: the final outcome has it); ``recipient`` (the waiting mail's entry in the
        schedule holds the mail: ``mailguard outcome`` hashes its address again). A booked
        mail's record keeps ``reason`` (what a reader of ``AsyncResult(id).info`` looks for
        first), ``tier``, ``wait`` and ``due``: about 100 B of JSON with Celery's own two keys,
        which Redis keeps in a 112-byte allocation. :meth:`from_waiting_dict` reads it back;
        final outcomes keep every field (:meth:`as_dict`)."""
        implied = _waiting_defaults(task_id, stored_whole=False)
        values = self.as_dict()
        values["refused"] = self.refused  # () when none: the default, left out
        if self.decided_at is not None:
            values["decided_at"] = round(self.decided_at, 3)
            if _decided_implied(self.decided_at, self.due, self.wait):
                values["decided_at"] = None
        return {
            name: value
            for name, value in values.items()
            if name not in _UNSTORED and value != implied[name]
        }

    @classmethod
    def from_waiting_dict(cls, data: dict[str, Any], task_id: str) -> Outcome:
        """The inverse of :meth:`as_waiting_dict` for the record of task ``task_id``: the
        fields left out come back (``deferred``, the task id as mail id, kind ``default``, one
        deferral, ``decided_at`` as ``due - wait``, the rest at their default; ``message_id``
        and ``recipient`` None, as only the schedule tells the recipient; a record that names
        one keeps it). A meta with a ``status`` (stored whole, or with only the fields at
        their default left out) is read as :meth:`from_dict` reads it."""
        stored_whole = "status" in data
        implied = _waiting_defaults(task_id, stored_whole=stored_whole)
        if stored_whole:
            return cls.from_dict(implied | data)
        values = implied | data
        due, wait = values.get("due"), values.get("wait")
        if (
            "decided_at" not in data
            and isinstance(due, float | int)
            and isinstance(wait, float | int)
        ):
            values["decided_at"] = round(float(due) - float(wait), 3)
        return cls.from_dict(values)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        """The inverse of :meth:`as_dict` (a missing field is its default); unknown keys are
        ignored."""
        known = cls.__dataclass_fields__
        values = {k: v for k, v in data.items() if k in known}
        refused = values.get("refused")
        values["refused"] = (
            tuple(dict(r) for r in refused) if isinstance(refused, list | tuple) else ()
        )
        return cls(**values)

    def but(self, **changes: Any) -> Outcome:
        """A copy with ``changes``."""
        return replace(self, **changes)


def _waiting_defaults(task_id: str | None, *, stored_whole: bool) -> dict[str, Any]:
    """Each field's value when a waiting mail's record leaves it out: :data:`_WAITING` and the
    task id as mail id over the fields' defaults (only the defaults for a meta stored with
    its ``status``)."""
    fields = Outcome.__dataclass_fields__.items()
    defaults = {name: spec.default for name, spec in fields if spec.default is not MISSING}
    return defaults if stored_whole else defaults | _WAITING | {"mail_id": task_id}


def _decided_implied(decided_at: float, due: float | None, wait: float | None) -> bool:
    """Whether a waiting record may leave ``decided_at`` out: ``due - wait`` tells it."""
    if due is None or wait is None:
        return False
    return abs(decided_at - (due - wait)) <= _DECIDED_SLACK
