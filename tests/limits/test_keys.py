"""Storage keys: keyed hashes, remembered within a bound."""

from __future__ import annotations

import pytest

from mailer.limits import keys
from mailer.limits.keys import KeyHasher


def test_a_remembered_key_is_the_key_hashed_afresh() -> None:
    hasher = KeyHasher("secret", "ns", "recipient")
    first = hasher.storage_key("a@example.com")
    assert hasher.storage_key("a@example.com") == first
    assert KeyHasher("secret", "ns", "recipient").storage_key("a@example.com") == first
    assert first.startswith("ns:{") and first.endswith("}") and "example" not in first
    assert KeyHasher("other", "ns", "recipient").storage_key("a@example.com") != first


def test_the_memo_stays_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keys, "KEY_MEMO", 8)
    hasher = KeyHasher(None, "ns", "recipient")
    stored = {f"u{i}@example.com": hasher.storage_key(f"u{i}@example.com") for i in range(20)}
    assert len(hasher._memo) <= 8
    fresh = KeyHasher(None, "ns", "recipient")
    assert all(fresh.storage_key(k) == v for k, v in stored.items())
