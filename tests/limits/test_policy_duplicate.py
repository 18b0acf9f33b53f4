"""Two tiers of one kind and window in a scope are refused with a message naming both, the
window they share and the one to keep."""

from __future__ import annotations

import pytest

from mailer import Policy


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "5/1s, 1/1s",
            "duplicate tier in recipient: 5/1s and 1/1s are two sliding tiers of the window 1s; "
            "keep one (the pair would allow 1 per 1s: write 1/1s)",
        ),
        (
            "sender: 3/1s fixed, 2/1000ms fixed",
            "duplicate tier in sender: 3/1s fixed and 2/1s fixed are two fixed tiers of the "
            "window 1s; keep one (the pair would allow 2 per 1s: write 2/1s fixed)",
        ),
        (
            "tenant: 10/1mo fixed, 20/1mo fixed",
            "duplicate tier in tenant: 10/1mo fixed and 20/1mo fixed are two fixed tiers of the "
            "window 1mo; keep one (the pair would allow 10 per 1mo: write 10/1mo fixed)",
        ),
    ],
)
def test_a_duplicate_tier_names_the_shared_window_and_the_one_to_keep(
    text: str, message: str
) -> None:
    """The message is whole: both tiers as written, the window, the one to write."""
    with pytest.raises(ValueError) as refused:
        Policy.parse(text)
    assert str(refused.value) == message


def test_one_window_of_two_kinds_is_not_a_duplicate() -> None:
    """A sliding and a fixed tier of one window are two tiers, both kept."""
    assert len(Policy.parse("5/1s, 1/1s fixed").tiers) == 2
