"""The sender reputation's plain data and store protocol (:mod:`mailer.records.reputation`:
the story): the thresholds written by people, one sender's standing, the store's operations."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from email.utils import parseaddr
from typing import Any, Literal, Protocol

#: What a store counts: ``s`` a mail sent, ``b`` a hard bounce, ``c`` a complaint.
Event = Literal["s", "b", "c"]
#: The rates a threshold may name, and the counter each divides by the mails sent.
RATES: dict[str, Event] = {"complaint": "c", "bounce": "b"}
#: Buckets per window: the window rolls by 1/24 of its length (an hour of a day).
BUCKETS = 24

#: The complaint rate a sender must stay under (Gmail's sender guidelines,
#: support.google.com/mail/answer/81126, and Yahoo's, senders.yahooinc.com: 0.3 %): pauses.
PROVIDER_COMPLAINT_PAUSE = 0.003
#: The complaint rate Gmail asks senders to keep under (the same page: 0.1 %): a warning line.
PROVIDER_COMPLAINT_WARNING = 0.001

_ITEM = re.compile(r"^\s*(\w+)\s+([0-9]*\.?[0-9]+)\s*%\s*$")


@dataclass(frozen=True)
class Thresholds:
    """The rates (fractions: 0.003 is 0.3 %) at which a sender's bulk kinds pause; None: that
    rate never pauses. Parse ``MAILGUARD_REPUTATION`` with :meth:`parse`."""

    complaint: float | None = None
    bounce: float | None = None

    @classmethod
    def parse(cls, text: str) -> Thresholds:
        """``"complaint 0.3%, bounce 5%"`` (either may be left out); ``ValueError`` in one line
        for anything else."""
        found: dict[str, float] = {}
        for item in text.split(","):
            match = _ITEM.match(item)
            if match is None or match.group(1).lower() not in RATES:
                raise ValueError(
                    f"{item.strip()[:40]!r} is not '<rate> <percent>%' with a rate of "
                    f"{' or '.join(RATES)} (complaint 0.3%, bounce 5%)"
                )
            percent = float(match.group(2))
            if not 0 < percent <= 100:
                raise ValueError(f"{item.strip()[:40]!r}: the percentage must be > 0 and <= 100")
            found[match.group(1).lower()] = percent / 100
        return cls(**found)

    def with_provider_defaults(self) -> Thresholds:
        """These thresholds, with the complaint rate at which Gmail and Yahoo act
        (:data:`PROVIDER_COMPLAINT_PAUSE`, 0.3 %) when none is given. Bounces keep None: no
        mailbox provider publishes a bounce rate."""
        if self.complaint is not None:
            return self
        return Thresholds(PROVIDER_COMPLAINT_PAUSE, self.bounce)

    def items(self) -> list[tuple[str, float]]:
        """The thresholds set, as ``(rate, fraction)``, complaint first."""
        pairs = (("complaint", self.complaint), ("bounce", self.bounce))
        return [(name, value) for name, value in pairs if value is not None]

    def __str__(self) -> str:
        return ", ".join(f"{name} {percent(value)}" for name, value in self.items())


def percent(fraction: float) -> str:
    """``0.003`` as ``0.3%``."""
    return f"{fraction * 100:.4g}%"


def sender_of(header: str) -> str:
    """The address a reputation is kept for: ``Shop <Orders@Example.org>`` is
    ``orders@example.org``."""
    return parseaddr(header)[1].strip().lower() or header.strip().lower()


@dataclass(frozen=True)
class Pause:
    """A sender's pause state: ``paused`` and why (``rate`` crossed ``threshold`` at ``value``,
    epoch seconds ``since``), or the record of its lift (``lifted_at``, ``lifted_by``: ``auto``
    or the operator, with the events forgiven by a resume)."""

    paused: bool
    sender: str = ""
    rate: str = ""
    value: float = 0.0
    threshold: float = 0.0
    since: float = 0.0
    lifted_at: float = 0.0
    lifted_by: str = ""
    forgiven: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        kept = {k: v for k, v in vars(self).items() if v not in ("", 0.0, {})}
        return json.dumps(kept | {"paused": self.paused})

    @classmethod
    def from_json(cls, raw: bytes | str | None) -> Pause | None:
        if raw is None:
            return None
        data: dict[str, Any] = json.loads(raw)
        known = cls.__dataclass_fields__
        values = {k: v for k, v in data.items() if k in known}
        if not isinstance(values.get("forgiven"), dict):  # Lua's cjson writes {} as []
            values.pop("forgiven", None)
        return cls(**values)


@dataclass(frozen=True)
class Standing:
    """One sender over the window: mails sent, hard bounces, complaints, and its pause state."""

    sender: str
    sent: int
    bounced: int
    complained: int
    pause: Pause | None = None

    @property
    def paused(self) -> bool:
        return self.pause is not None and self.pause.paused

    def rate(self, name: str) -> float:
        """``bounced / sent`` or ``complained / sent`` (0 when nothing was sent)."""
        count = self.bounced if RATES[name] == "b" else self.complained
        return count / self.sent if self.sent else 0.0


@dataclass(frozen=True)
class Counted:
    """What a store answers after counting: the standing afterwards and whether the count
    paused the sender (``paused``) or lifted its pause (``lifted``), else ``""``."""

    standing: Standing
    transition: Literal["", "paused", "lifted"] = ""


def crossed(standing: Standing, limits: Limits) -> tuple[str, float, float]:
    """The rate that crossed its threshold (``rate >= threshold``, with at least ``minimum``
    mails sent) as ``(rate, value, threshold)``; ``("", 0, 0)`` when none did. Complaints
    first. The one rule both stores apply (the Lua script mirrors it)."""
    if standing.sent < max(limits.minimum, 1):
        return "", 0.0, 0.0
    for name, threshold in limits.thresholds.items():
        value = standing.rate(name)
        if value >= threshold:
            return name, value, threshold
    return "", 0.0, 0.0


@dataclass(frozen=True)
class Limits:
    """What a count is judged by: the thresholds, the window (seconds), the minimum volume
    (mails sent in the window) below which no rate counts, and the complaint rate (a fraction)
    at which a complaint logs a WARNING before any pause (None: no warning)."""

    thresholds: Thresholds
    window: float
    minimum: int
    warning: float | None = PROVIDER_COMPLAINT_WARNING

    @property
    def bucket(self) -> float:
        """A bucket's length in seconds (the window over :data:`BUCKETS`)."""
        return self.window / BUCKETS

    def bucket_of(self, now: float) -> int:
        """The bucket epoch seconds ``now`` fall in."""
        return math.floor(now / self.bucket)

    @property
    def keep_ms(self) -> int:
        """Milliseconds a sender's counters, a lift's record and a bucket's marks outlive their
        last write: one window and one bucket (``keep`` in ``lua/count.lua``)."""
        return math.ceil((BUCKETS + 1) * self.bucket * 1000)


def oldest_bucket(newest: int) -> int:
    """The oldest bucket of the window whose newest bucket is ``newest`` (:data:`BUCKETS` in
    all): older ones have left the window."""
    return newest - BUCKETS + 1


class ReputationStore(Protocol):
    """Per-sender counters in buckets over a rolling window, and each sender's pause. Every
    method is one atomic step (one round trip on Redis). ``sid`` is the sender's short hash,
    ``sender`` its address (kept for listing)."""

    def count(
        self,
        sid: str,
        sender: str,
        events: str,
        *,
        now: float,
        limits: Limits,
        mark: tuple[str, str] | None = None,
    ) -> Counted:
        """Add one to each counter in ``events`` (``"s"``, ``"sb"``, ``"c"``; ``""`` counts
        nothing: a check), drop buckets out of the window, judge the rates and pause or lift.
        ``mark``: ``(hashed Message-ID, kind)`` of a mail sent, kept for the window so that a
        webhook's event can be attributed (:meth:`attribute`)."""
        ...

    def attribute(self, mark: str, now: float, limits: Limits) -> tuple[str, str] | None:
        """``(sender, kind)`` of the mail whose hashed Message-ID is ``mark``, if sent within
        the window."""
        ...

    def resume(self, sid: str, sender: str, by: str, now: float, limits: Limits) -> Standing:
        """Lift the pause by hand: the window's bounces and complaints are forgiven (recorded
        in the pause record with ``by`` and ``now``); the standing afterwards."""
        ...

    def senders(self) -> list[tuple[str, str]]:
        """Every sender counted, as ``(sid, sender)``."""
        ...

    def state_read(self, sid: str) -> tuple[Any, str] | None:
        """The redis-py client and the key of ``sid``'s pause (for the gates' one ``MGET``);
        None in memory."""
        ...

    def pause_of(self, sid: str) -> Pause | None:
        """The stored pause record of ``sid``."""
        ...
