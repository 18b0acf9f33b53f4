"""Policy parsing: the tiers it accepts and the errors that name the bad part."""

from __future__ import annotations

import pytest

from mailer import Policy, Tier
from mailer.limits.policy import MAX_PROVIDERS


def test_reference_policy_parses_into_sorted_tiers() -> None:
    """The reference policy gives three tiers in milliseconds, sorted by window."""
    policy = Policy.parse("10/24h, 1/60s, 5/1h", name="recipient")
    assert policy.tiers == (Tier(1, 60_000), Tier(5, 3_600_000), Tier(10, 86_400_000))
    assert policy.name == "recipient"
    assert policy.max_limit == 10
    assert policy.max_window_ms == 86_400_000
    assert str(policy) == "1/1m, 5/1h, 10/1d"


@pytest.mark.parametrize(
    ("text", "tier"),
    [
        ("3/500ms", Tier(3, 500)),
        ("1/0.2s", Tier(1, 200)),
        ("2/s", Tier(2, 1000)),
        ("4 / 2 m", Tier(4, 120_000)),
        ("7/1d", Tier(7, 86_400_000)),
    ],
)
def test_units_and_decimals(text: str, tier: Tier) -> None:
    """Every unit, decimals and an omitted number parse to exact milliseconds."""
    assert Policy.parse(text).tiers == (tier,)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty policy"),
        ("  ", "empty policy"),
        ("0/1s", "limit must be positive"),
        ("-1/1s", "limit must be positive"),
        ("1/0s", "window must be positive"),
        ("1/5x", "unknown unit 'x'"),
        ("1/5", "unknown unit ''"),
        ("a/1s", "limit 'a' is not a whole number"),
        ("1/1s, 2/1000ms", "duplicate tier"),
        ("1/0.0001s", "whole number of milliseconds"),
        ("1/60s,", "bad tier ''"),
        ("1-60s", "bad tier '1-60s'"),
        ("1/32d", "at most"),
        ("1001/1h", "at most"),
    ],
)
def test_bad_text_names_the_bad_part(text: str, message: str) -> None:
    """Malformed policies raise ValueError whose message names what is wrong."""
    with pytest.raises(ValueError, match=message):
        Policy.parse(text)


def test_bad_policy_name_is_refused() -> None:
    """A name that would corrupt storage keys (braces, spaces) is refused."""
    with pytest.raises(ValueError, match="bad policy name"):
        Policy.parse("1/1s", name="a {b}")


def test_scoped_policy_parses_every_scope_and_kind() -> None:
    """The issue's example parses into recipient tiers plus domain, sender and tenant scopes."""
    policy = Policy.parse(
        "recipient: 1/60s, 5/1h, 10/24h; domain: 600/1m; "
        "sender: 14/1s gcra, 50000/1d fixed; tenant: 100000/30d fixed"
    )
    assert policy.tiers == (Tier(1, 60_000), Tier(5, 3_600_000), Tier(10, 86_400_000))
    assert policy.scopes == (
        ("domain", (Tier(600, 60_000),)),
        ("sender", (Tier(14, 1000, "gcra"), Tier(50_000, 86_400_000, "fixed"))),
        ("tenant", (Tier(100_000, 30 * 86_400_000, "fixed"),)),
    )
    assert str(policy) == (
        "recipient: 1/1m, 5/1h, 10/1d; domain: 600/1m; "
        "sender: 14/1s gcra, 50000/1d fixed; tenant: 100000/30d fixed"
    )
    assert Policy.parse(str(policy)) == policy


def test_unscoped_text_is_the_recipient_scope() -> None:
    """A text without SCOPE: is the recipient scope, exactly as before scopes existed."""
    assert Policy.parse("1/60s") == Policy.parse("recipient: 1/60s")
    assert not Policy.parse("1/60s").scoped


def test_sender_only_policy_and_month_tier() -> None:
    """A policy may name only shared scopes; ``mo`` is a calendar month of a fixed tier."""
    policy = Policy.parse("sender: 4/2s; tenant: 1000/mo fixed")
    assert policy.tiers == ()
    assert policy.scopes[1] == ("tenant", (Tier(1000, 31 * 86_400_000, "fixed", months=1),))
    assert str(policy.scopes[1][1][0]) == "1000/1mo fixed"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("planet: 1/1s", "unknown scope 'planet'"),
        ("sender: 1/1s bucket", "unknown kind 'bucket'"),
        ("sender: 1/mo", "'mo' is for fixed tiers only"),
        ("sender: 1/1mo gcra", "'mo' is for fixed tiers only"),
        ("tenant: 1/13mo fixed", "1 to 12 months"),
        ("sender: 2000/1s", "at most 1000.*'2000/1s fixed' or '... gcra'"),
        ("sender: 1/1s; sender: 2/1s", "duplicate scope 'sender'"),
        ("sender:", "empty scope 'sender'"),
        ("recipient 1/1s; sender: 1/1s", "bad scope 'recipient 1/1s'"),
        ("sender: 1/1s fixed, 2/1000ms fixed", "duplicate tier in sender"),
        ("tenant: 1/2x fixed", "unknown unit 'x'"),
    ],
)
def test_bad_scoped_text_names_the_bad_part(text: str, message: str) -> None:
    """A bad scope, kind, month tier or oversized sliding tier is refused naming that part."""
    with pytest.raises(ValueError, match=message):
        Policy.parse(text)


def test_large_quota_is_fine_as_fixed_or_gcra() -> None:
    """Fixed and gcra tiers keep one counter or timestamp, so their limit is not capped at 1000."""
    policy = Policy.parse("sender: 50000/1d fixed, 14/1s gcra")
    assert [t.limit for t in policy.scopes[0][1]] == [14, 50_000]


def test_provider_tiers_parse_for_every_provider_and_named_ones() -> None:
    """``provider:`` and ``provider NAME:`` parse into scopes of their own, decided after the
    others (every provider's first, then the named ones by name), and print back."""
    policy = Policy.parse(
        "provider yahoo: 20/1s; sender: 14/1s gcra; Provider  Google: 20000/1h fixed, 50/1s gcra; "
        "provider: 2000/1h fixed; recipient: 1/60s"
    )
    assert policy.tiers == (Tier(1, 60_000),)
    assert [scope for scope, _ in policy.scopes] == [
        "sender",
        "provider",
        "provider google",
        "provider yahoo",
    ]
    assert dict(policy.scopes)["provider google"] == (
        Tier(50, 1000, "gcra"),
        Tier(20_000, 3_600_000, "fixed"),
    )
    assert policy.provider_scoped and not Policy.parse("sender: 1/1s").provider_scoped
    text = str(policy)
    assert text == (
        "recipient: 1/1m; sender: 14/1s gcra; provider: 2000/1h fixed; "
        "provider google: 50/1s gcra, 20000/1h fixed; provider yahoo: 20/1s"
    )
    assert Policy.parse(text) == policy
    assert str(Policy.parse("provider example.co.uk: 5/1m")) == "provider example.co.uk: 5/1m"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("provider google: 1/1s; provider GOOGLE: 2/1s", r"^duplicate provider 'google': give"),
        ("provider: 1/1s; provider: 2/1s", r"^duplicate scope 'provider'"),
        ("provider google yahoo: 1/1s", r"^bad provider scope 'provider google yahoo': expected"),
        ("provider g_mail: 1/1s", r"^bad provider scope 'provider g_mail'"),
        ("provider -x: 1/1s", r"^bad provider scope"),
        ("providers: 1/1s", r"^unknown scope 'providers': use one of .*provider NAME"),
        ("provider google:", r"^empty scope 'provider google'"),
        ("provider google: 1/1s, 2/1000ms", r"^duplicate tier in provider google"),
        ("provider google: 2000/1h", r"^tier 2000/1h: a sliding tier keeps every admission"),
        ("provider google: 5/1x", r"^bad tier '5/1x'"),
    ],
)
def test_bad_provider_scopes_are_refused_in_one_line(text: str, message: str) -> None:
    """An unknown form, a duplicate named provider, a bad tier: one line naming the part."""
    with pytest.raises(ValueError, match=message) as raised:
        Policy.parse(text)
    assert "\n" not in str(raised.value)


def test_too_many_named_providers_are_refused() -> None:
    """Each named provider is a scope of the one decision: at most MAX_PROVIDERS."""
    Policy.parse("; ".join(f"provider p{i}: 1/1s" for i in range(MAX_PROVIDERS)))
    with pytest.raises(ValueError, match="too many named providers"):
        Policy.parse("; ".join(f"provider p{i}: 1/1s" for i in range(MAX_PROVIDERS + 1)))
