"""A recipient's budget read from a shared limiter without consuming it (``mailguard status``).

The report says, per tier of the policy, how much of it the recipient has used (sends and
bookings in the window ending now), when its next mail may go and which tier binds, and how
many sends are booked in the future. The recipient appears only as the keyed hash the outcomes
carry. For a scoped policy (:func:`scoped_report`): the room of each scope (recipient, domain,
sender, a tenant, a provider).
"""

from __future__ import annotations

from typing import Any

from mailer import Limiter, Policy, Tier
from mailer.limits import MAX_LIMIT, PROVIDER, SENDER_KEY
from mailer.settings import Settings


def budget_report(limiter: Limiter, settings: Settings, key: str) -> dict[str, Any]:
    """``key``'s budget under ``settings.policy`` as ``limiter`` holds it (its JSON form).

    Raises :class:`~mailer.errors.BackendUnavailable` when the limiter cannot be read.
    """
    decision = limiter.peek(key)
    now_ms = decision.at_ms - decision.wait_ms
    booked = bookings(settings, key, now_ms)
    tiers: list[dict[str, Any]] = [
        {"tier": str(tier), "used": tier.limit - room, "limit": tier.limit}
        for tier, room in zip(settings.policy.tiers, decision.remaining, strict=True)
    ]
    return {
        "recipient": limiter.storage_key("recipient", key),
        "policy": str(settings.policy),
        "allowed_now": decision.allowed,
        "next_at": decision.at,
        "wait": decision.wait,
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


def scoped_report(
    limiter: Limiter,
    key: str | None,
    *,
    tenant: str | None,
    sender: bool,
    provider: str | None = None,
) -> dict[str, Any]:
    """The budgets of a scoped policy's scopes, read without consuming (their JSON form).

    With ``key`` (a recipient's limit key): when its next mail may go (with ``tenant``, as a
    mail of that tenant) and the room of every scope such a mail is counted in (its
    provider's: the limiter's finder names it). Without it: the sender scope (``sender``), the
    tenant ``tenant``'s scope and the provider ``provider``'s. Subjects are shown as their
    keyed hashes (the sender's, a tenant's and a provider's name as given; a domain that is
    its own provider, hashed as in the domain scope).
    """
    policy = limiter.policy
    present = {scope for scope, _ in policy.scope_tiers()}
    report: dict[str, Any] = {"policy": str(policy)}
    asked: list[tuple[str, str, str]] = []  # (scope, subject, how it is shown)
    if key is not None:
        decision = limiter.peek(key, tenant=tenant)
        domain = key.rpartition("@")[2]
        report |= {
            "recipient": limiter.storage_key("recipient", key),
            "allowed_now": decision.allowed,
            "next_at": decision.at,
            "wait": decision.wait,
            "binding_tier": _scoped_tier(decision.scope, decision.tier),
        }
        if "recipient" in present:
            asked.append(("recipient", key, report["recipient"]))
        if "domain" in present:
            asked.append(("domain", domain, limiter.storage_key("domain", domain)))
        if provider is None and policy.provider_scoped and domain:
            found = limiter.provider_of(key) or domain
            scope = provider_scope(policy, found)
            if scope is not None:
                shown = found if found != domain else limiter.storage_key(scope, found)
                asked.append((scope, found, shown))
    if (sender or key is not None) and "sender" in present:
        asked.append(("sender", SENDER_KEY, SENDER_KEY))
    if tenant is not None and "tenant" in present:
        asked.append(("tenant", tenant, tenant))
    if provider is not None and (scope := provider_scope(policy, provider)) is not None:
        asked.append((scope, provider, provider))
    report["scopes"] = [
        {
            "scope": scope,
            "subject": shown,
            "tiers": [
                {"tier": str(tier), "used": tier.limit - room, "limit": tier.limit}
                for tier, room in limiter.room(scope, subject)
            ],
        }
        for scope, subject, shown in asked
    ]
    return report


def provider_scope(policy: Policy, provider: str) -> str | None:
    """The scope a mail of ``provider`` is counted in: ``provider NAME`` when the policy names
    it, else ``provider``; None when the policy has neither."""
    present = {scope for scope, _ in policy.scopes}
    for scope in (f"{PROVIDER} {provider}", PROVIDER):
        if scope in present:
            return scope
    return None


def _scoped_tier(scope: str | None, tier: object) -> str | None:
    if tier is None:
        return None
    return str(tier) if scope in (None, "recipient") else f"{scope} {tier}"
