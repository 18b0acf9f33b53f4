"""Calendar windows of ``fixed`` tiers: which window holds a time, in a configured time zone.

A ``fixed`` tier ``L/W`` counts admissions per window ``[start, end)`` aligned to local midnight
of ``MAILGUARD_TIMEZONE`` (default UTC): ``1d`` resets at midnight, ``1h`` on the hour, ``1mo``
on the first of the month. Windows longer than a day are aligned to the local epoch
(1970-01-01 00:00). Times are epoch milliseconds. The local offset is taken at the time asked
about, so a window that spans a daylight-saving change is an hour longer or shorter.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from mailer.limits.policy import MONTH_MS, Tier


def zone(name: str) -> timezone | ZoneInfo:
    """Return the time zone called ``name`` (``UTC``, ``Europe/Paris``); ``ValueError`` if none."""
    if name.upper() == "UTC":
        return timezone.utc
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r}: use an IANA name such as 'UTC'") from exc


def window(t_ms: int, tier: Tier, tz: timezone | ZoneInfo) -> tuple[int, int]:
    """Return ``(start_ms, end_ms)`` of ``tier``'s calendar window holding epoch ms ``t_ms``."""
    local = datetime.fromtimestamp(t_ms / 1000, tz)
    if tier.months:
        index = (local.year * 12 + local.month - 1) // tier.months * tier.months
        first = datetime(index // 12, index % 12 + 1, 1, tzinfo=tz)
        index += tier.months
        following = datetime(index // 12, index % 12 + 1, 1, tzinfo=tz)
        return _ms(first), _ms(following)
    offset = local.utcoffset() or timedelta(0)
    offset_ms = int(offset.total_seconds() * 1000)
    start = (t_ms + offset_ms) // tier.window_ms * tier.window_ms - offset_ms
    return start, start + tier.window_ms


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def offset_ms(tz: timezone | ZoneInfo, now: float) -> int:
    """The offset of ``tz`` from UTC at epoch seconds ``now``, in ms."""
    delta = datetime.fromtimestamp(now, tz).utcoffset()
    return int(delta.total_seconds() * 1000) if delta else 0


def month_starts(tiers: Iterable[Tier], now_ms: int, tz: timezone | ZoneInfo) -> str:
    """For each month count N of ``tiers``' calendar-month tiers, the starts (epoch ms) of its
    windows from two before the one holding ``now_ms`` to four after (bookings reach at most 7
    days ahead), as ``"N=b1,b2,...;M=..."``; "" without such tiers. The scoped Lua script's
    ``ARGV[10]`` (Lua has no calendar)."""
    parts = []
    for months in sorted({t.months for t in tiers if t.months}):
        tier = Tier(1, months * MONTH_MS, "fixed", months)
        start, _ = window(now_ms, tier, tz)
        starts = [start]
        for _ in range(2):
            starts.insert(0, window(starts[0] - 1, tier, tz)[0])
        for _ in range(4):
            starts.append(window(starts[-1], tier, tz)[1])
        parts.append(f"{months}=" + ",".join(str(b) for b in starts))
    return ";".join(parts)
