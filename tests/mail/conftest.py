"""Fixtures of the mail's tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Dummy AWS credentials for moto's server; no AWS config file of the machine is read."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }.items():
        monkeypatch.setenv(name, value)
