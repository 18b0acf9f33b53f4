"""Policy parsing: the tiers it accepts and the errors that name the bad part."""

from __future__ import annotations

import pytest

from mailer import Policy, Tier


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
