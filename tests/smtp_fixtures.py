"""The ``smtp_server`` fixture: a fresh recording SMTP server per test (tests/smtp_server.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.smtp_server import SmtpTestServer


@pytest.fixture
def smtp_server() -> Iterator[SmtpTestServer]:
    """A running aiosmtpd server on 127.0.0.1, stopped after the test if still running."""
    server = SmtpTestServer().start()
    try:
        yield server
    finally:
        server.stop()
