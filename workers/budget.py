"""A recipient's budget read from a shared limiter without consuming it (``mailguard status``).

The report says, per tier of the policy, how much of it the recipient has used (sends and
bookings in the window ending now), when its next mail may go and which tier binds, and how
many sends are booked in the future. The recipient appears only as the keyed hash the outcomes
carry.
"""

from __future__ import annotations

from typing import Any

from mailer.limiter import Limiter
from mailer.policy import MAX_LIMIT, Policy, Tier
from mailer.settings import Settings


def budget_report(limiter: Limiter, settings: Settings, key: str) -> dict[str, Any]:
    """``key``'s budget under ``settings.policy`` as ``limiter`` holds it (its JSON form).

    Raises :class:`~mailer.errors.BackendUnavailable` when the limiter cannot be read.
    """
    decision = limiter.peek(key)
    now_ms = decision.at_ms - decision.retry_after_ms
    booked = bookings(settings, key, now_ms)
    tiers: list[dict[str, Any]] = [
        {"tier": str(tier), "used": tier.limit - room, "limit": tier.limit}
        for tier, room in zip(settings.policy.tiers, decision.remaining, strict=True)
    ]
    return {
        "recipient": limiter.storage_key(key),
        "policy": str(settings.policy),
        "allowed_now": decision.allowed,
        "next_at": decision.at,
        "wait": decision.retry_after,
        "binding_tier": str(decision.tier) if decision.tier else None,
        "booked": booked,
        "tiers": tiers,
    }


def bookings(settings: Settings, key: str, now_ms: int) -> int:
    """How many of ``key``'s log entries lie after ``now_ms``: its booked future sends.

    ``peek`` reports the room per tier "in the window ending now, bookings included". A probe
    policy with the same name (so the same stored key) and one tier (MAX_LIMIT, longest
    window W), peeked at ``now + W``, counts exactly the entries after ``now``. Reads only.
    """
    window = settings.policy.max_window_ms
    probe = Policy((Tier(MAX_LIMIT, window),), name=settings.policy.name)
    at = (now_ms + window) / 1000
    limiter = Limiter.from_url(
        settings.limiter_url, probe, clock=lambda: at, secret=settings.secret
    )
    try:
        return MAX_LIMIT - limiter.peek(key).remaining[0]
    finally:
        limiter.close()
