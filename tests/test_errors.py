"""BackendUnavailable: names the backend that is down, masks the URL, survives a pickle."""

from __future__ import annotations

import pickle

import pytest

from mailer import BackendUnavailable


def test_backend_unavailable_names_the_limiter_by_default() -> None:
    """Callers that name no backend (the limiter's) get "limiter backend ..." as before."""
    error = BackendUnavailable("redis://cache:6379/0", ConnectionError("refused"))
    assert error.backend == "limiter"
    assert str(error).startswith("limiter backend redis://cache:6379/0 is unavailable: refused;")


@pytest.mark.parametrize("backend", ["limiter", "ledger"])
def test_backend_unavailable_names_its_backend_and_masks_the_password(backend: str) -> None:
    """The message starts with the backend's name and never shows the URL's password."""
    error = BackendUnavailable("redis://:hunter2@cache:6379/0", backend=backend)
    assert error.backend == backend
    assert error.url == "redis://:***@cache:6379/0"
    assert str(error).startswith(f"{backend} backend redis://:***@cache:6379/0 is unavailable;")
    assert "hunter2" not in str(error)


def test_backend_unavailable_survives_a_pickle_round_trip() -> None:
    """Message, masked URL and backend come back unchanged from a pickle (result backends)."""
    error = BackendUnavailable("redis://:hunter2@cache/0", OSError("gone"), backend="ledger")
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 (bytes we just made)
    assert type(copy) is BackendUnavailable
    assert (str(copy), copy.url, copy.backend) == (str(error), error.url, "ledger")
