"""Replay a trace of send attempts through the real limiter on a virtual clock: tune a policy.

Every attempt asks the same limiter code a worker asks (memory backend,
:class:`~mailer.clock.ManualClock`): :class:`~mailer.limits.limiter.Limiter` for a
policy of recipient sliding tiers, :class:`~mailer.limits.scoped.ScopedLimiter` for a scoped one
(domain, sender and tenant scopes, fixed and gcra tiers, kind shares), with its kind's
``max_wait`` as the worker would:

- allowed: sent at its attempt time (on time);
- booked: *deferred*, sent at its booking, ``lateness`` = booking - attempt (seconds);
- refused (the earliest slot is further away than the kind's ``max_wait``): *dropped*.

A trace is a CSV of ``time,recipient[,kind[,tenant]]`` (time in seconds from the start of the
trace; see :func:`read_csv`) or a generated pattern (:func:`generate`). :func:`compare` replays
one trace through two policies. Pure: no Celery, no I/O
besides what the caller hands in, no real clock.

>>> report = simulate(generate("abuse", recipients=10), Policy.parse("1/60s, 5/1h, 10/24h"))
>>> report.total.delivered + report.total.dropped == report.total.attempts
True

Not a model of SMTP: every mail the limiter lets through counts as delivered at its slot.
"""

from __future__ import annotations

import csv
import hashlib
import math
import random
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from mailer.clock import ManualClock
from mailer.errors import InvalidAddress, UnknownKind
from mailer.limits.decision import Decision
from mailer.limits.limiter import MAX_WAIT, Limiter
from mailer.limits.policy import Policy
from mailer.limits.scoped import ScopedLimiter, check_tenant
from mailer.mail.address import DEFAULT_RULES, AddressRules, normalise_address
from mailer.mail.kinds import Kinds
from mailer.steps import Send, plan

#: Epoch seconds of a trace's time 0 (a Monday, 00:00 UTC); only differences ever matter.
EPOCH = 1_767_571_200.0
DAY = 86_400.0
#: Label of the deferrals and drops that no tier caused (only the order of bookings binds).
ORDER = "(order)"
#: The generated patterns, by name (see :func:`generate`).
PATTERNS = ("day", "steady", "bursts", "abuse")

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


def simulate(
    attempts: Sequence[Attempt],
    policy: Policy,
    kinds: Kinds | None = None,
    *,
    rules: AddressRules = DEFAULT_RULES,
    secret: str | None = None,
) -> Report:
    """Replay ``attempts`` (any order; equal times keep trace order) through a fresh limiter.

    Recipients are normalised into limit keys as the worker does (``Ada+1@Example.com`` and
    ``ada@example.com`` share a budget). Raises ``ValueError`` naming the attempt (its CSV line
    when known) for an invalid address or an unknown kind. Recipients are reported by a short
    hash keyed with ``secret`` (random per run by default, so labels cannot be confirmed by
    guessing addresses).
    """
    kinds = kinds if kinds is not None else Kinds.defaults()
    clock = ManualClock(EPOCH)
    secret = secret or secrets.token_hex(16)
    decide = _decider(policy, clock, secret)
    keys: dict[str, tuple[str, str]] = {}  # address -> (limit key, hashed label)
    waits: dict[str, float] = {}
    results: list[Result | None] = [None] * len(attempts)
    order = sorted(range(len(attempts)), key=lambda i: attempts[i].time)
    for i in order:
        attempt = attempts[i]
        known = keys.get(attempt.recipient)
        if known is None:
            key = _limit_key(attempt, i, rules)
            # The label: a keyed hash's head, enough to tell recipients apart, no address.
            known = keys[attempt.recipient] = (key, _label(key, secret))
        max_wait = waits.get(attempt.kind)
        if max_wait is None:
            max_wait = waits[attempt.kind] = _max_wait(kinds, attempt, i)
        clock.now = EPOCH + attempt.time
        decision = decide(known[0], attempt, max_wait, kinds[attempt.kind].share)
        action = plan(decision, max_countdown=math.inf)
        if isinstance(action, Send):
            results[i] = Result(attempt, action.status, 0.0, None, known[1])
            continue
        tier = (
            ORDER if action.tier is None else tier_label(decision.scope or "recipient", action.tier)
        )
        results[i] = Result(attempt, action.status, action.wait, tier, known[1])
    done = [r for r in results if r is not None]
    return _report(policy, waits, done)


def compare(
    attempts: Sequence[Attempt],
    policy: Policy,
    against: Policy,
    kinds: Kinds | None = None,
    *,
    rules: AddressRules = DEFAULT_RULES,
    secret: str | None = None,
) -> tuple[Report, Report]:
    """Replay ``attempts`` through ``policy`` and through ``against``: the same trace, the same
    recipient labels (one ``secret``), two independent limiters."""
    secret = secret or secrets.token_hex(16)
    first = simulate(attempts, policy, kinds, rules=rules, secret=secret)
    return first, simulate(attempts, against, kinds, rules=rules, secret=secret)


def tier_label(scope: str, tier: object) -> str:
    """How reports name a tier: ``5/1h`` for the recipient's, ``sender 14/1s gcra`` otherwise."""
    return str(tier) if scope == "recipient" else f"{scope} {tier}"


_Decide = Callable[[str, Attempt, float, float], Decision]


def _decider(policy: Policy, clock: ManualClock, secret: str) -> _Decide:
    """The limiter the guard would build for ``policy`` (memory, on ``clock``), as a function
    of (limit key, attempt, max_wait, share)."""
    if not policy.scoped and all(t.kind == "sliding" for t in policy.tiers):
        limiter = Limiter.from_url("memory://", policy, clock=clock, secret=secret)
        return lambda key, _attempt, max_wait, _share: limiter.acquire(key, max_wait=max_wait)
    scoped = ScopedLimiter(policy, clock=clock, secret=secret)

    def decide(key: str, attempt: Attempt, max_wait: float, share: float) -> Decision:
        return scoped.acquire(key, tenant=attempt.tenant, max_wait=max_wait, share=share)

    return decide


def _label(key: str, secret: str) -> str:
    """An 8-hex-digit keyed hash of a limit key (BLAKE2b keyed with ``secret``)."""
    return hashlib.blake2b(key.encode(), key=secret.encode()[:64], digest_size=4).hexdigest()


def _limit_key(attempt: Attempt, index: int, rules: AddressRules) -> str:
    try:
        return normalise_address(attempt.recipient, rules).limit_key
    except InvalidAddress as exc:
        raise ValueError(f"{_where(attempt, index)}: {exc}") from None


def _max_wait(kinds: Kinds, attempt: Attempt, index: int) -> float:
    try:
        return min(kinds[attempt.kind].max_wait, MAX_WAIT)
    except UnknownKind as exc:
        raise ValueError(f"{_where(attempt, index)}: {exc}") from None


def _where(attempt: Attempt, index: int) -> str:
    return f"line {attempt.line}" if attempt.line else f"attempt {index}"


def _report(policy: Policy, waits: Mapping[str, float], results: list[Result]) -> Report:
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


def read_csv(lines: Iterable[str], *, kinds: Kinds | None = None) -> list[Attempt]:
    """Parse a trace: one ``time,recipient[,kind[,tenant]]`` row a line, time in seconds from
    the start.

    An optional header row (first field ``time``), blank lines and lines starting with ``#``
    are skipped; a missing or empty kind is ``default``; a missing or empty tenant is none
    (the mail counts in no tenant, as ``send_mail`` without ``tenant=``). Each row is checked
    (time a finite number >= 0, a valid address, a kind that ``kinds`` knows, the built-ins by
    default, a tenant of 1-64 characters): a bad row raises ``ValueError("line N: ...")``
    naming the problem, never the address.
    """
    kinds = kinds if kinds is not None else Kinds.defaults()
    attempts: list[Attempt] = []
    checked: set[str] = set()
    reader = csv.reader(lines)
    first = True
    try:
        for row in reader:
            line = reader.line_num
            if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                continue
            if first and row[0].strip().lower() == "time":
                first = False
                continue
            first = False
            attempts.append(_row(row, line, kinds, checked))
    except csv.Error as exc:
        raise ValueError(f"line {reader.line_num}: not valid CSV: {exc}") from None
    return attempts


def read_csv_file(path: str | Path, *, kinds: Kinds | None = None) -> list[Attempt]:
    """:func:`read_csv` on a UTF-8 file; errors say ``<file>, line N: ...``."""
    try:
        with Path(path).open(encoding="utf-8", newline="") as handle:
            return read_csv(handle, kinds=kinds)
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    except ValueError as exc:
        raise ValueError(f"{path}, {exc}") from None


def _row(row: list[str], line: int, kinds: Kinds, checked: set[str]) -> Attempt:
    if len(row) not in (2, 3, 4):
        raise ValueError(
            f"line {line}: expected time,recipient[,kind[,tenant]], got {len(row)} fields"
        )
    text = row[0].strip()
    try:
        time = float(text)
    except ValueError:
        raise ValueError(f"line {line}: time {text[:20]!r} is not a number of seconds") from None
    if not math.isfinite(time) or time < 0:
        raise ValueError(f"line {line}: time must be a finite number >= 0, got {text[:20]!r}")
    recipient = row[1].strip()
    if recipient not in checked:
        try:
            normalise_address(recipient)
        except InvalidAddress as exc:
            raise ValueError(f"line {line}: {exc}") from None
        checked.add(recipient)
    kind = row[2].strip() if len(row) >= 3 and row[2].strip() else "default"
    if kind not in kinds:
        known = ", ".join(sorted(kinds))
        raise ValueError(f"line {line}: unknown kind {kind[:64]!r}; known: {known}")
    tenant = row[3].strip() if len(row) == 4 and row[3].strip() else None
    try:
        check_tenant(tenant)
    except ValueError as exc:
        raise ValueError(f"line {line}: {exc}") from None
    return Attempt(time, recipient, kind, line, tenant)


def generate(
    pattern: str, *, recipients: int = 1000, duration: float = DAY, seed: int = 0
) -> list[Attempt]:
    """A generated trace over ``duration`` seconds for ``recipients`` addresses, in time order.

    - ``day``: a day of mixed traffic: a 09:00 newsletter to everyone (``default``), notices
      through the day (``notice``), login codes with impatient second requests (``code``),
      and one abused address sent a code every 15 s from 10:00 to 11:00.
    - ``steady``: every recipient gets a ``notice`` every 30 minutes, with a random phase.
    - ``bursts``: every recipient gets three bursts of five ``default`` mails within 10 s.
    - ``abuse``: one ``notice`` per recipient at a random time, and one address sent a
      ``code`` every 10 s for the first two hours.

    Deterministic for a given ``seed``; times are whole milliseconds. Addresses are
    ``user00042@example.com`` and, for the abused one, ``target@example.org``.
    """
    if pattern not in _GENERATORS:
        raise ValueError(f"unknown pattern {pattern[:40]!r}; known: {', '.join(PATTERNS)}")
    if recipients < 1:
        raise ValueError(f"recipients must be at least 1, got {recipients}")
    if not math.isfinite(duration) or duration <= 0:
        raise ValueError(f"duration must be a positive number of seconds, got {duration}")
    rng = random.Random(seed)
    addresses = [f"user{i:05d}@example.com" for i in range(recipients)]
    attempts = _GENERATORS[pattern](rng, addresses, duration)
    attempts.sort(key=lambda a: a.time)
    # Whole milliseconds, the limiter's resolution: send times are then exact.
    return [Attempt(round(a.time, 3), a.recipient, a.kind) for a in attempts if a.time < duration]


ABUSED = "target@example.org"


def _day(rng: random.Random, addresses: list[str], duration: float) -> list[Attempt]:
    out: list[Attempt] = []
    for address in addresses:
        out.append(Attempt(9 * 3600 + rng.uniform(0, 120), address, "default"))
        for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
            out.append(Attempt(rng.uniform(0, duration), address, "notice"))
        if rng.random() < 0.3:
            login = rng.uniform(6 * 3600, 23 * 3600)
            out.append(Attempt(login, address, "code"))
            if rng.random() < 0.4:  # "I didn't get it": asks again within 90 s
                out.append(Attempt(login + rng.uniform(15, 90), address, "code"))
    out.extend(Attempt(10 * 3600 + 15.0 * k, ABUSED, "code") for k in range(240))
    return out


def _steady(rng: random.Random, addresses: list[str], duration: float) -> list[Attempt]:
    out: list[Attempt] = []
    for address in addresses:
        t = rng.uniform(0, 1800)
        while t < duration:
            out.append(Attempt(t, address, "notice"))
            t += 1800
    return out


def _bursts(rng: random.Random, addresses: list[str], duration: float) -> list[Attempt]:
    out: list[Attempt] = []
    for address in addresses:
        for _ in range(3):
            start = rng.uniform(0, duration)
            out.extend(Attempt(start + rng.uniform(0, 10), address, "default") for _ in range(5))
    return out


def _abuse(rng: random.Random, addresses: list[str], duration: float) -> list[Attempt]:
    out = [Attempt(rng.uniform(0, duration), address, "notice") for address in addresses]
    out.extend(Attempt(10.0 * k, ABUSED, "code") for k in range(720))
    return out


_GENERATORS: dict[str, Callable[[random.Random, list[str], float], list[Attempt]]] = {
    "day": _day,
    "steady": _steady,
    "bursts": _bursts,
    "abuse": _abuse,
}


#: The lateness histogram's ticks: seconds and the durations people think in.
LATENESS_TICKS = (
    (0.01, "10 ms"),
    (0.1, "100 ms"),
    (1.0, "1 s"),
    (10.0, "10 s"),
    (60.0, "1 min"),
    (600.0, "10 min"),
    (3600.0, "1 h"),
    (6 * 3600.0, "6 h"),
    (DAY, "1 d"),
)


def plot(report: Report, path: str | Path, *, recipients: int = 8) -> None:
    """Draw ``report`` to a PNG at ``path``: a timeline of the ``recipients`` most limited
    recipients (attempts, sends, deferrals, drops) above a histogram of lateness.

    Needs matplotlib (``pip install 'mailguard[plot]'``); raises ``RuntimeError`` saying so
    when it is missing.
    """
    try:
        from matplotlib.figure import Figure  # noqa: PLC0415 - optional extra, loaded on use
    except ImportError:
        raise RuntimeError(
            "plotting needs matplotlib: pip install 'mailguard[plot]' (or matplotlib)"
        ) from None
    fig = Figure(figsize=(11, 7), layout="constrained")
    timeline, histogram = fig.subplots(2, 1, height_ratios=(3, 2))
    top = [label for label, _ in report.top_recipients(recipients)]
    rows = {label: row for row, label in enumerate(reversed(top))}
    marks: dict[str, tuple[list[float], list[float]]] = {
        name: ([], []) for name in ("attempt", "sent", "deferred", "dropped")
    }
    for result in report.results:
        row = rows.get(result.recipient)
        if row is None:
            continue
        hour = result.attempt.time / 3600
        marks["attempt"][0].append(hour)
        marks["attempt"][1].append(row + 0.2)
        if result.status == "dropped":
            marks["dropped"][0].append(hour)
            marks["dropped"][1].append(row)
        else:
            marks[result.status][0].append((result.attempt.time + result.lateness) / 3600)
            marks[result.status][1].append(row)
    styles = {
        "attempt": ("|", "grey", "attempt"),
        "sent": ("o", "tab:green", "sent on time"),
        "deferred": ("o", "tab:orange", "sent late (deferred)"),
        "dropped": ("x", "tab:red", "dropped"),
    }
    for name, (xs, ys) in marks.items():
        marker, colour, label = styles[name]
        timeline.scatter(xs, ys, marker=marker, color=colour, label=label, s=18)
    timeline.set_yticks(range(len(top)), [f"recipient {label}" for label in reversed(top)])
    timeline.set_xlabel("hours from the start")
    timeline.set_title(f"policy {report.policy}: the {len(top)} most limited recipients")
    timeline.legend(loc="upper right", fontsize="small")
    late = [max(r.lateness, 0.001) for r in report.results if r.status == "deferred"]
    # Lateness spans milliseconds to a day: log-spaced bins, ticks in seconds, minutes, hours.
    low, high = min(late, default=1.0), max(late, default=1.0)
    edges = [low * (high * 1.0001 / low) ** (k / 40) for k in range(41)]
    histogram.hist(late, bins=edges, color="tab:orange")
    histogram.set_xscale("log")
    ticks = [(t, name) for t, name in LATENESS_TICKS if low / 2 <= t <= high * 2]
    histogram.set_xticks([t for t, _ in ticks], [name for _, name in ticks])
    histogram.set_xlabel("lateness of deferred mails after the attempt (log scale)")
    histogram.set_ylabel("mails")
    histogram.set_title(f"{len(late)} deferred mails")
    fig.savefig(str(path), format="png")
