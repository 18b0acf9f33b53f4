"""Calendar windows of fixed tiers: aligned to local midnight, the hour, the month."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from mailer import Limiter, ManualClock, Policy
from mailer.limits.windows import window, zone


def _ms(text: str, tz: str = "UTC") -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=zone(tz)).timestamp() * 1000)


def test_a_day_window_runs_from_local_midnight_to_midnight() -> None:
    """1d fixed in Europe/Paris starts at 00:00 Paris time, not UTC."""
    tier = Policy.parse("tenant: 5/1d fixed").scopes[0][1][0]
    paris = zone("Europe/Paris")
    start, end = window(_ms("2026-11-23T10:30:00", "Europe/Paris"), tier, paris)
    assert (start, end) == (
        _ms("2026-11-23T00:00:00", "Europe/Paris"),
        _ms("2026-11-24T00:00:00", "Europe/Paris"),
    )


def test_month_windows_follow_the_calendar() -> None:
    """1mo runs from the first of the month to the first of the next (February is short)."""
    tier = Policy.parse("tenant: 5/1mo fixed").scopes[0][1][0]
    start, end = window(_ms("2026-02-14T12:00:00"), tier, timezone.utc)
    assert (start, end) == (_ms("2026-02-01T00:00:00"), _ms("2026-03-01T00:00:00"))


def test_unknown_time_zone_is_refused() -> None:
    """A zone name that does not exist is refused in one line."""
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        zone("Mars/Olympus")


def test_a_tenants_daily_quota_defers_the_fourth_mail_to_midnight() -> None:
    """tenant: 3/1d fixed: the 4th mail of the day is booked at the next local midnight."""
    clock = ManualClock(_ms("2026-11-23T15:00:00") / 1000)
    limiter = Limiter.from_url("memory://", Policy.parse("tenant: 3/1d fixed"), clock=clock)
    for i in range(3):
        assert limiter.acquire(f"r{i}@example.com", tenant="acme").allowed
    fourth = limiter.acquire("r3@example.com", tenant="acme", mail_id="m4", max_wait=86_400)
    assert fourth.booked and fourth.at_ms == _ms("2026-11-24T00:00:00")
    assert (fourth.scope, str(fourth.tier)) == ("tenant", "3/1d fixed")
    assert limiter.acquire("r4@example.com", tenant="other").allowed  # tenants are apart
