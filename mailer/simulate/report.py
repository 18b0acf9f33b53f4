"""The simulator's data: attempts, their results, summaries and the report of one replay."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from mailer.limits.policy import Policy

#: Epoch seconds of a trace's time 0 (a Monday, 00:00 UTC); only differences ever matter.
EPOCH = 1_767_571_200.0
DAY = 86_400.0
#: Label of the deferrals and drops that no tier caused (only the order of bookings binds).
ORDER = "(order)"
Status = Literal["sent", "deferred", "dropped"]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One call of ``send_mail``: at ``time`` seconds from the trace's start, to ``recipient``.

    ``line`` is the CSV line it came from (0 for generated traces), for error messages.
    """

    time: float
    recipient: str
    kind: str = "default"
    line: int = 0
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class Result:
    """What became of one attempt.

    ``lateness`` (seconds): booking - attempt for a deferred mail, 0 for one sent on time, and
    for a dropped one the wait it would have needed. ``tier`` is the binding tier (text such as
    ``"5/1h"``, with its scope for a shared one, ``"sender 14/1s gcra"``, :data:`ORDER`, or
    ``None`` when sent on time). ``recipient`` is a short keyed
    hash of the recipient's limit key, never the address.
    """

    attempt: Attempt
    status: Status
    lateness: float
    tier: str | None
    recipient: str

    @property
    def sent_at(self) -> float | None:
        """Seconds from the start when the mail went out; ``None`` when dropped."""
        return None if self.status == "dropped" else self.attempt.time + self.lateness


@dataclass(frozen=True, slots=True)
class Summary:
    """Counts over a group of attempts; lateness (seconds) over its deferred mails only."""

    attempts: int
    sent: int
    deferred: int
    dropped: int
    lateness_p50: float | None
    lateness_p95: float | None
    lateness_max: float | None

    @property
    def delivered(self) -> int:
        """Mails that went out: on time plus deferred."""
        return self.sent + self.deferred

    @classmethod
    def of(cls, results: Iterable[Result]) -> Summary:
        """Summarise ``results``."""
        counts = {"sent": 0, "deferred": 0, "dropped": 0}
        late: list[float] = []
        for result in results:
            counts[result.status] += 1
            if result.status == "deferred":
                late.append(result.lateness)
        late.sort()
        return cls(
            attempts=sum(counts.values()),
            sent=counts["sent"],
            deferred=counts["deferred"],
            dropped=counts["dropped"],
            lateness_p50=percentile(late, 50),
            lateness_p95=percentile(late, 95),
            lateness_max=late[-1] if late else None,
        )


@dataclass(frozen=True)
class Report:
    """The outcome of a simulation: per attempt (``results``, in trace order) and summaries.

    ``per_kind`` is keyed by kind name; ``per_tier`` by binding tier (every tier of the policy,
    in order, then :data:`ORDER` if it occurred), counting the deferred and dropped mails that
    tier made wait. ``duration`` is the span of attempt times in seconds.
    """

    policy: Policy
    max_waits: Mapping[str, float]
    results: Sequence[Result]
    total: Summary
    per_kind: Mapping[str, Summary]
    per_tier: Mapping[str, Summary]
    recipients: int
    duration: float
    per_recipient: Mapping[str, Summary] = field(repr=False, default_factory=dict)

    def top_recipients(self, count: int = 5) -> list[tuple[str, Summary]]:
        """The ``count`` recipients (hashed labels) with the most drops, then deferrals."""
        ranked = sorted(
            self.per_recipient.items(),
            key=lambda item: (-item[1].dropped, -item[1].deferred, -item[1].attempts, item[0]),
        )
        return ranked[:count]


def percentile(ordered: Sequence[float], p: float) -> float | None:
    """The nearest-rank ``p``-th percentile of an ascending sequence; ``None`` when empty."""
    if not ordered:
        return None
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def tier_label(scope: str, tier: object) -> str:
    """How reports name a tier: ``5/1h`` for the recipient's, ``sender 14/1s gcra`` otherwise."""
    return str(tier) if scope == "recipient" else f"{scope} {tier}"


def build_report(policy: Policy, waits: Mapping[str, float], results: list[Result]) -> Report:
    by_kind: dict[str, list[Result]] = {}
    by_tier: dict[str, list[Result]] = {
        tier_label(scope, tier): [] for scope, tiers in policy.scope_tiers() for tier in tiers
    }
    by_recipient: dict[str, list[Result]] = {}
    for result in results:
        by_kind.setdefault(result.attempt.kind, []).append(result)
        by_recipient.setdefault(result.recipient, []).append(result)
        if result.tier is not None:
            by_tier.setdefault(result.tier, []).append(result)
    times = [r.attempt.time for r in results]
    return Report(
        policy=policy,
        max_waits=dict(waits),
        results=results,
        total=Summary.of(results),
        per_kind={kind: Summary.of(group) for kind, group in sorted(by_kind.items())},
        per_tier={tier: Summary.of(group) for tier, group in by_tier.items()},
        recipients=len(by_recipient),
        duration=max(times) - min(times) if times else 0.0,
        per_recipient={label: Summary.of(group) for label, group in by_recipient.items()},
    )
