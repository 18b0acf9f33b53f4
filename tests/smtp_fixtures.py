"""The ``smtp_server`` fixture: a fresh recording SMTP server per test (devservers.smtp_server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devservers.smtp_server import SmtpTestServer, TestCertificate


@pytest.fixture
def smtp_server() -> Iterator[SmtpTestServer]:
    """A running aiosmtpd server on 127.0.0.1, stopped after the test if still running."""
    server = SmtpTestServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def test_certificate(tmp_path_factory: pytest.TempPathFactory) -> TestCertificate:
    """A self-signed certificate for 127.0.0.1, made once per session with ``openssl``."""
    return TestCertificate.create(tmp_path_factory.mktemp("smtp-tls"))
