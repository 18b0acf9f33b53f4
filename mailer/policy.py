"""Rate-limit policies: a named list of tiers ``limit / window`` enforced together.

>>> str(Policy.parse("10/24h, 1/60s, 5/1h", name="recipient"))
'1/1m, 5/1h, 10/1d'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_TIER_RE = re.compile(r"^\s*(?P<limit>[^/]*?)\s*/\s*(?P<num>[0-9.]*)\s*(?P<unit>[A-Za-z]*)\s*$")

#: Largest limit of a tier: the sliding log keeps this many admission times per key.
MAX_LIMIT = 1000
#: Longest window of a tier, in milliseconds (31 days).
MAX_WINDOW_MS = 31 * 86_400_000

#: The reference policy per recipient: 1 mail per minute, 5 per hour, 10 per day.
REFERENCE_POLICY = "1/60s, 5/1h, 10/24h"


@dataclass(frozen=True, slots=True)
class Tier:
    """At most ``limit`` admissions in any sliding window of ``window_ms`` milliseconds."""

    limit: int
    window_ms: int

    @property
    def window(self) -> float:
        """The window in seconds."""
        return self.window_ms / 1000

    def __str__(self) -> str:
        return f"{self.limit}/{_format_ms(self.window_ms)}"


@dataclass(frozen=True, slots=True)
class Policy:
    """A named set of tiers, sorted by window, all enforced atomically in one decision.

    Build one with :meth:`parse`. ``name`` is part of every storage key, so two policies with
    different names never share counts.
    """

    tiers: tuple[Tier, ...]
    name: str = "default"

    def __post_init__(self) -> None:
        if not self.tiers:
            raise ValueError("empty policy: give at least one tier such as '1/60s'")
        if not self.name or len(self.name) > 64 or any(c in self.name for c in "{}:\0\r\n "):
            raise ValueError(
                f"bad policy name {self.name!r}: 1-64 characters without spaces, braces or colons"
            )
        seen: set[int] = set()
        for tier in self.tiers:
            if tier.limit <= 0 or tier.window_ms <= 0:
                raise ValueError(f"tier {tier}: limit and window must be positive")
            if tier.limit > MAX_LIMIT or tier.window_ms > MAX_WINDOW_MS:
                raise ValueError(
                    f"tier {tier}: at most {MAX_LIMIT} per window of at most 31d are supported"
                )
            if tier.window_ms in seen:
                raise ValueError(
                    f"duplicate tier: two tiers with window {_format_ms(tier.window_ms)}"
                )
            seen.add(tier.window_ms)
        object.__setattr__(self, "tiers", tuple(sorted(self.tiers, key=lambda t: t.window_ms)))

    @classmethod
    def parse(cls, text: str, *, name: str = "default") -> Policy:
        """Parse ``"1/60s, 5/1h, 10/24h"``: comma-separated ``LIMIT/WINDOW`` tiers.

        The window is a positive number (decimals allowed, e.g. ``0.2s``) with a unit among
        ``ms, s, m, h, d``; it must come to a whole number of milliseconds, at most 31 days.
        The number may be left out (``3/s`` is ``3/1s``); the unit may not. Limits go up to
        1000: every admission is kept in the log, so for larger quotas use another algorithm.
        Raises ``ValueError`` naming the bad part.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError("empty policy: give at least one tier such as '1/60s'")
        tiers = tuple(_parse_tier(part) for part in text.split(","))
        return cls(tiers=tiers, name=name)

    @property
    def max_limit(self) -> int:
        """The largest limit: how many admissions a key's log keeps at most."""
        return max(t.limit for t in self.tiers)

    @property
    def max_window_ms(self) -> int:
        """The longest window in milliseconds: how long an admission matters."""
        return max(t.window_ms for t in self.tiers)

    def __str__(self) -> str:
        return ", ".join(str(t) for t in self.tiers)


def _parse_tier(part: str) -> Tier:
    match = _TIER_RE.match(part)
    if match is None or not part.strip():
        raise ValueError(f"bad tier {part.strip()!r}: expected LIMIT/WINDOW such as '5/1h'")
    limit_text, num, unit = match["limit"], match["num"], match["unit"]
    try:
        limit = int(limit_text)
    except ValueError:
        raise ValueError(
            f"bad tier {part.strip()!r}: limit {limit_text!r} is not a whole number"
        ) from None
    if limit <= 0:
        raise ValueError(f"bad tier {part.strip()!r}: limit must be positive, got {limit}")
    if unit not in _UNITS_MS:
        raise ValueError(
            f"bad tier {part.strip()!r}: unknown unit {unit!r}, use one of ms, s, m, h, d"
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
    return Tier(limit=limit, window_ms=int(window_ms))


def _format_ms(ms: int) -> str:
    for unit in ("d", "h", "m", "s"):
        size = _UNITS_MS[unit]
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
