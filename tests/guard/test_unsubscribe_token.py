"""Unsubscribe tokens are read only in their one encoding: a token that decodes to the same
bytes but is spelled otherwise (the unused low bits of the last base64 character set, a
padding ``=``, a stray character) is refused, as any changed character is."""

from __future__ import annotations

import string
from collections.abc import Callable

import pytest

from mailer.unsubscribe import Claims, InvalidToken, Signer

ALPHABET = string.ascii_uppercase + string.ascii_lowercase + string.digits + "-_"
CLAIMS = Claims("mYgLc7Ps5j1CKe_n", "news@example.org", "newsletter")


def _same_bytes_spellings(part: str) -> list[str]:
    """``part`` with its last character replaced by each other one that decodes to the same
    bytes (only the low bits the length leaves unused differ)."""
    unused = {2: 4, 3: 2}.get(len(part) % 4, 0)  # bits of the last character never read
    last = ALPHABET.index(part[-1])
    return [
        part[:-1] + ALPHABET[other]
        for other in range(64)
        if other != last and other >> unused == last >> unused
    ]


def test_a_token_spelled_otherwise_with_the_same_bytes_is_refused() -> None:
    """The signature's 16 bytes are 22 characters, the last with 4 unused bits: its 15 other
    spellings (``...Y6w`` as ``...Y6x``) are refused, and so is the payload's where it has
    unused bits; the token as made verifies."""
    signer = Signer("test-secret")
    token = signer.token(CLAIMS)
    assert signer.verify(token) == CLAIMS
    head, _, signature = token.partition(".")
    variants = [f"{head}.{s}" for s in _same_bytes_spellings(signature)]
    variants += [f"{h}.{signature}" for h in _same_bytes_spellings(head)]
    assert len(variants) >= 15
    for variant in variants:
        with pytest.raises(InvalidToken):
            signer.verify(variant)


SPELLINGS: dict[str, Callable[[str, str], str]] = {
    "padding": lambda head, sig: f"{head}.{sig}=",
    "two paddings": lambda head, sig: f"{head}.{sig}==",
    "padded payload": lambda head, sig: f"{head}=.{sig}",
    "newline": lambda head, sig: f"{head}.{sig}\n",
    "space inside": lambda head, sig: f"{head}.{sig[:5]} {sig[5:]}",
}


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_padding_or_a_stray_character_is_refused(spelling: str) -> None:
    """Padding ``=`` (never written), a newline or a space inside: refused."""
    signer = Signer("test-secret")
    head, _, sig = signer.token(CLAIMS).partition(".")
    with pytest.raises(InvalidToken):
        signer.verify(SPELLINGS[spelling](head, sig))
