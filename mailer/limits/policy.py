"""Rate-limit policies: tiers ``limit / window [kind]`` per scope, all enforced together.

>>> str(Policy.parse("10/24h, 1/60s, 5/1h", name="recipient"))
'1/1m, 5/1h, 10/1d'
>>> str(Policy.parse("recipient: 1/60s; sender: 14/1s gcra, 50000/1d fixed"))
'recipient: 1/1m; sender: 14/1s gcra, 50000/1d fixed'
>>> str(Policy.parse("provider google: 20000/1h fixed, 50/1s gcra; provider: 2000/1h fixed"))
'provider: 2000/1h fixed; provider google: 50/1s gcra, 20000/1h fixed'

A text without ``SCOPE:`` is the recipient scope alone (every policy written before scopes).
Scopes: ``recipient`` (the normalised address), ``domain`` (its domain), ``sender`` (one budget
for every worker), ``tenant`` (named at ``send_mail.delay(..., tenant=...)``). Tier kinds:
``sliding`` (default, the exact sliding log, limit at most 1000), ``fixed`` (calendar windows in
``MAILGUARD_TIMEZONE``; ``mo`` is a calendar month) and ``gcra`` (a token bucket of capacity
``limit`` refilled at ``limit`` per window).

Provider scopes count by the recipient domain's mailbox provider (:mod:`mailer.providers`, found
from MX: every Google Workspace domain is ``google``). ``provider NAME:`` limits the provider
called NAME (``provider google: 50/1s``); ``provider:`` limits every other provider, each on its
own count (``outlook``'s mails do not count against ``yahoo``'s). A provider named on its own
has its own tiers *instead of* ``provider:``'s, so that ``provider: 2000/1h fixed; provider
google: 20000/1h fixed`` gives Google the larger budget (were both applied, the smaller would
always bind). Each is a scope of its own (:data:`PROVIDER`, ``provider google``), decided with
the others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_TIER_RE = re.compile(
    r"^\s*(?P<limit>[^/]*?)\s*/\s*(?P<num>[0-9.]*)\s*(?P<unit>[A-Za-z]*)\s*(?P<kind>[A-Za-z]*)\s*$"
)

#: Largest limit of a sliding tier: the sliding log keeps this many admission times per key.
MAX_LIMIT = 1000
#: Largest limit of a fixed or gcra tier (one counter or one timestamp, whatever the limit).
MAX_COUNTER_LIMIT = 10**9
#: Longest window of a tier, in milliseconds (31 days); a ``fixed`` tier may say ``12mo``.
MAX_WINDOW_MS = 31 * 86_400_000
#: The longest a calendar month can be, in milliseconds: a ``mo`` window's bound for TTLs.
MONTH_MS = 31 * 86_400_000
#: The scopes a policy may limit, in the order they are decided (and reserved on a Cluster).
SCOPES = ("recipient", "domain", "sender", "tenant")
#: The scope of every provider without tiers of its own; a named provider's scope is
#: ``provider NAME``. Decided after :data:`SCOPES`, ``provider`` first, then by name.
PROVIDER = "provider"
#: The most providers a policy may name (each is a scope in the one decision).
MAX_PROVIDERS = 32
_PROVIDER_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9.-]{0,62}[a-z0-9])?$")
#: Tier kinds: the exact sliding log, calendar-aligned fixed windows, GCRA token bucket.
KINDS = ("sliding", "fixed", "gcra")

#: The reference policy per recipient: 1 mail per minute, 5 per hour, 10 per day.
REFERENCE_POLICY = "1/60s, 5/1h, 10/24h"


@dataclass(frozen=True, slots=True)
class Tier:
    """At most ``limit`` admissions per window of ``window_ms`` milliseconds.

    ``kind`` says which window: ``sliding`` (any window ending at any time), ``fixed`` (calendar
    windows: ``1d`` from midnight to midnight in the configured time zone; ``months`` > 0 for
    ``mo`` windows, whose ``window_ms`` is then the 31-day bound) or ``gcra`` (a bucket of
    ``limit`` tokens refilled at ``limit`` per window, one token every ``window_ms / limit``).
    """

    limit: int
    window_ms: int
    kind: str = "sliding"
    months: int = 0

    @property
    def window(self) -> float:
        """The window in seconds (a month tier: its 31-day bound)."""
        return self.window_ms / 1000

    def __str__(self) -> str:
        window = f"{self.months}mo" if self.months else _format_ms(self.window_ms)
        suffix = "" if self.kind == "sliding" else f" {self.kind}"
        return f"{self.limit}/{window}{suffix}"


@dataclass(frozen=True, slots=True)
class Policy:
    """A named set of tiers, sorted by window, all enforced atomically in one decision.

    Build one with :meth:`parse`. ``name`` is part of every storage key, so two policies with
    different names never share counts.
    """

    tiers: tuple[Tier, ...]
    name: str = "default"
    #: The other scopes' tiers: ``(scope, tiers)`` pairs in the order of :data:`SCOPES`.
    scopes: tuple[tuple[str, tuple[Tier, ...]], ...] = ()

    def __post_init__(self) -> None:
        if not self.tiers and not self.scopes:
            raise ValueError("empty policy: give at least one tier such as '1/60s'")
        if not self.name or len(self.name) > 64 or any(c in self.name for c in "{}:\0\r\n "):
            raise ValueError(
                f"bad policy name {self.name!r}: 1-64 characters without spaces, braces or colons"
            )
        object.__setattr__(self, "tiers", _checked("recipient", self.tiers))
        scopes = []
        for scope, tiers in self.scopes:
            if scope not in SCOPES[1:] and not is_provider_scope(scope):
                raise ValueError(f"unknown scope {scope!r}: use one of {_SCOPE_NAMES}")
            if tiers:
                scopes.append((scope, _checked(scope, tiers)))
        if len({scope for scope, _ in scopes}) != len(scopes):
            raise ValueError("duplicate scope: give each scope once")
        if sum(scope.startswith(PROVIDER + " ") for scope, _ in scopes) > MAX_PROVIDERS:
            raise ValueError(f"too many named providers: at most {MAX_PROVIDERS}")
        object.__setattr__(self, "scopes", tuple(sorted(scopes, key=_scope_order)))

    @classmethod
    def parse(cls, text: str, *, name: str = "default") -> Policy:
        """Parse ``"1/60s, 5/1h, 10/24h"`` or ``"recipient: 1/60s; sender: 14/1s gcra"``.

        Scopes are separated by ``;``, each ``SCOPE: TIER, TIER``; a text without any
        ``SCOPE:`` is the recipient scope. A tier is ``LIMIT/WINDOW [KIND]``: the window is a
        positive number (decimals allowed, e.g. ``0.2s``) with a unit among ``ms, s, m, h, d``
        (and ``mo``, a calendar month, for ``fixed`` only); it must come to a whole number of
        milliseconds, at most 31 days. The number may be left out (``3/s`` is ``3/1s``); the
        unit may not. KIND is ``sliding`` (default; limit at most 1000, as every admission is
        kept), ``fixed`` or ``gcra``. Raises ``ValueError`` naming the bad part.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError("empty policy: give at least one tier such as '1/60s'")
        if ":" not in text and ";" not in text:
            return cls(tiers=tuple(_parse_tier(part) for part in text.split(",")), name=name)
        recipient: tuple[Tier, ...] = ()
        scopes: list[tuple[str, tuple[Tier, ...]]] = []
        seen: set[str] = set()
        for section in text.split(";"):
            scope, colon, body = section.partition(":")
            scope = " ".join(scope.lower().split())
            if not colon:
                raise ValueError(
                    f"bad scope {section.strip()!r}: expected SCOPE: TIER, TIER such as "
                    "'sender: 14/1s gcra'"
                )
            if scope.partition(" ")[0] == PROVIDER:
                scope = _provider_scope(scope)
            elif scope not in SCOPES:
                raise ValueError(f"unknown scope {scope!r}: use one of {_SCOPE_NAMES}")
            if scope in seen:
                named = scope.startswith(PROVIDER + " ")
                what = f"provider {scope[len(PROVIDER) + 1 :]!r}" if named else f"scope {scope!r}"
                raise ValueError(f"duplicate {what}: give each {what.split(maxsplit=1)[0]} once")
            seen.add(scope)
            if not body.strip():
                raise ValueError(f"empty scope {scope!r}: give at least one tier such as '1/60s'")
            tiers = tuple(_parse_tier(part) for part in body.split(","))
            if scope == "recipient":
                recipient = tiers
            else:
                scopes.append((scope, tiers))
        return cls(tiers=recipient, name=name, scopes=tuple(scopes))

    @property
    def provider_scoped(self) -> bool:
        """Whether any provider scope has tiers (a mail's provider is then looked up)."""
        return any(is_provider_scope(scope) for scope, _ in self.scopes)

    @property
    def scoped(self) -> bool:
        """Whether any scope besides the recipient has tiers."""
        return bool(self.scopes)

    def scope_tiers(self) -> tuple[tuple[str, tuple[Tier, ...]], ...]:
        """Every scope with tiers, recipient first: ``(scope, tiers)`` pairs."""
        head = (("recipient", self.tiers),) if self.tiers else ()
        return head + self.scopes

    @property
    def max_limit(self) -> int:
        """The largest recipient limit: how many admissions a recipient's log keeps at most."""
        return max(t.limit for t in self.tiers)

    @property
    def max_window_ms(self) -> int:
        """The longest recipient window in milliseconds: how long an admission matters."""
        return max(t.window_ms for t in self.tiers)

    def __str__(self) -> str:
        if not self.scopes:
            return ", ".join(str(t) for t in self.tiers)
        return "; ".join(
            f"{scope}: " + ", ".join(str(t) for t in tiers) for scope, tiers in self.scope_tiers()
        )


_SCOPE_NAMES = ", ".join((*SCOPES, PROVIDER, f"{PROVIDER} NAME"))


def is_provider_scope(scope: str) -> bool:
    """Whether ``scope`` is :data:`PROVIDER` or a named provider's (``provider google``)."""
    if scope == PROVIDER:
        return True
    head, _, name = scope.partition(" ")
    return head == PROVIDER and _PROVIDER_NAME.match(name) is not None


def _scope_order(pair: tuple[str, tuple[Tier, ...]]) -> tuple[int, str]:
    """Decision order: :data:`SCOPES`, then ``provider``, then named providers by name."""
    scope = pair[0]
    return (SCOPES.index(scope), "") if scope in SCOPES else (len(SCOPES), scope)


def _provider_scope(scope: str) -> str:
    """``provider`` or ``provider NAME`` (NAME a provider's name, lower case), else a one-line
    ``ValueError`` naming the bad form."""
    words = scope.split(" ")
    if len(words) == 1:
        return PROVIDER
    if len(words) == 2 and _PROVIDER_NAME.match(words[1]):
        return scope
    raise ValueError(
        f"bad provider scope {scope!r}: expected 'provider: TIERS' (every provider) or "
        "'provider NAME: TIERS' with one provider name such as google, microsoft, yahoo or "
        "example.net (letters, digits, dots and hyphens)"
    )


def _checked(scope: str, tiers: tuple[Tier, ...]) -> tuple[Tier, ...]:
    seen: dict[tuple[str, int, int], Tier] = {}
    for tier in tiers:
        if tier.kind not in KINDS:
            raise ValueError(f"tier {tier}: unknown kind {tier.kind!r}, use sliding, fixed or gcra")
        if tier.limit <= 0 or tier.window_ms <= 0:
            raise ValueError(f"tier {tier}: limit and window must be positive")
        if tier.months and tier.kind != "fixed":
            raise ValueError(f"tier {tier}: the unit 'mo' is for fixed tiers only")
        if tier.kind == "sliding" and tier.limit > MAX_LIMIT:
            raise ValueError(
                f"tier {tier}: a sliding tier keeps every admission, at most {MAX_LIMIT}; "
                f"for a larger quota write '{tier.limit}/{_format_ms(tier.window_ms)} fixed' "
                "or '... gcra'"
            )
        if tier.limit > MAX_COUNTER_LIMIT or (tier.window_ms > MAX_WINDOW_MS and not tier.months):
            raise ValueError(
                f"tier {tier}: at most {MAX_COUNTER_LIMIT} per window of at most 31d "
                "(or 12mo, fixed) are supported"
            )
        ident = (tier.kind, tier.window_ms, tier.months)
        if (first := seen.get(ident)) is not None:
            raise ValueError(_duplicate(scope, first, tier))
        seen[ident] = tier
    return tuple(sorted(tiers, key=lambda t: (t.window_ms, KINDS.index(t.kind))))


def _duplicate(scope: str, first: Tier, second: Tier) -> str:
    """The refusal of two tiers of one kind and window in ``scope``: which to keep."""
    window = f"{first.months}mo" if first.months else _format_ms(first.window_ms)
    stricter = min((first, second), key=lambda t: t.limit)
    return (
        f"duplicate tier in {scope}: {first} and {second} are two {first.kind} tiers of the "
        f"window {window}; keep one (the pair would allow {stricter.limit} per {window}: "
        f"write {stricter})"
    )


def _parse_tier(part: str) -> Tier:
    match = _TIER_RE.match(part)
    if match is None or not part.strip():
        raise ValueError(f"bad tier {part.strip()!r}: expected LIMIT/WINDOW such as '5/1h'")
    limit_text, num, unit = match["limit"], match["num"], match["unit"]
    kind = match["kind"].lower() or "sliding"
    if kind not in KINDS:
        raise ValueError(
            f"bad tier {part.strip()!r}: unknown kind {match['kind']!r}, use sliding, fixed or gcra"
        )
    try:
        limit = int(limit_text)
    except ValueError:
        raise ValueError(
            f"bad tier {part.strip()!r}: limit {limit_text!r} is not a whole number"
        ) from None
    if limit <= 0:
        raise ValueError(f"bad tier {part.strip()!r}: limit must be positive, got {limit}")
    if unit == "mo":
        return _month_tier(part, limit, num, kind)
    if unit not in _UNITS_MS:
        raise ValueError(
            f"bad tier {part.strip()!r}: unknown unit {unit!r}, use one of ms, s, m, h, d "
            "(mo for fixed tiers)"
        )
    try:
        amount = Decimal(num) if num else Decimal(1)
    except InvalidOperation:
        raise ValueError(f"bad tier {part.strip()!r}: window {num!r} is not a number") from None
    window_ms = amount * _UNITS_MS[unit]
    if window_ms <= 0:
        raise ValueError(f"bad tier {part.strip()!r}: window must be positive")
    if window_ms != window_ms.to_integral_value():
        raise ValueError(
            f"bad tier {part.strip()!r}: window must be a whole number of milliseconds"
        )
    return Tier(limit=limit, window_ms=int(window_ms), kind=kind)


def _month_tier(part: str, limit: int, num: str, kind: str) -> Tier:
    if kind != "fixed":
        raise ValueError(f"bad tier {part.strip()!r}: the unit 'mo' is for fixed tiers only")
    if num and not num.isdigit():
        raise ValueError(f"bad tier {part.strip()!r}: months must be a whole number")
    months = int(num) if num else 1
    if not 1 <= months <= 12:
        raise ValueError(f"bad tier {part.strip()!r}: 1 to 12 months")
    return Tier(limit=limit, window_ms=months * MONTH_MS, kind="fixed", months=months)


def _format_ms(ms: int) -> str:
    for unit in ("d", "h", "m", "s"):
        size = _UNITS_MS[unit]
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
