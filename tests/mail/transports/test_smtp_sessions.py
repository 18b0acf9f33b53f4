"""SMTP sessions kept between mails, against a real aiosmtpd server (STARTTLS + AUTH where the
reuse is the point): one connection carries several mails, the count and the idle bounds open
another, a session the server dropped is replaced without losing or doubling a mail, a forked
child never touches its parent's connection. Connections are counted by the server."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from devservers.smtp_server import SmtpTestServer, TestCertificate
from mailer.clock import ManualClock
from mailer.mail.envelope import Envelope, envelope_of
from mailer.mail.message import Mail
from mailer.mail.transports import SmtpTransport


def envelope(n: int, to: str = "ada@example.com") -> Envelope:
    """Mail number ``n`` (its own mail id, so the server can tell each one apart)."""
    return envelope_of(
        Mail(
            to=to,
            subject=f"Mail {n}",
            body="Your code is 482913\n",
            mail_id=f"mail-{n:04d}",
            sender="noreply@sender.example",
        )
    )


def subjects(server: SmtpTestServer) -> list[str]:
    """The subjects the server received, in order."""
    return [str(d.message["Subject"]) for d in server.delivered]


def no_sleep(seconds: float) -> None:
    """Tenacity's waits, skipped."""


@pytest.fixture
def tls_server(test_certificate: TestCertificate) -> Iterator[SmtpTestServer]:
    """A STARTTLS + AUTH server (ada / s3cret)."""
    with SmtpTestServer(("ada", "s3cret"), tls="starttls", cert=test_certificate) as server:
        yield server


def tls_transport(
    server: SmtpTestServer, cert: TestCertificate, **options: object
) -> SmtpTransport:
    return SmtpTransport.from_url(
        f"smtp+starttls://ada:s3cret@127.0.0.1:{server.port}",
        ssl_context=cert.client_context(),
        sleep=no_sleep,
        **options,  # type: ignore[arg-type]
    )


def test_one_session_carries_many_mails_with_one_handshake_and_login(
    tls_server: SmtpTestServer, test_certificate: TestCertificate
) -> None:
    """Ten mails: one connection, one STARTTLS, one AUTH, RSET before each reuse, each mail
    delivered once, in order."""
    transport = tls_transport(tls_server, test_certificate)
    receipts = [transport.send(envelope(n)) for n in range(10)]
    assert [r.attempts for r in receipts] == [1] * 10
    assert subjects(tls_server) == [f"Mail {n}" for n in range(10)]
    assert tls_server.connections == 1
    assert tls_server.handler.logins == [(b"ada", b"s3cret")]
    assert len(tls_server.handler.peer_certs) == 1  # one TLS handshake
    assert tls_server.handler.rset_commands == 9
    transport.close()
    assert len(transport.sessions) == 0


def test_the_count_bound_opens_a_new_session(
    tls_server: SmtpTestServer, test_certificate: TestCertificate
) -> None:
    """``session_mails=3``: seven mails take three connections (3 + 3 + 1)."""
    transport = tls_transport(tls_server, test_certificate, session_mails=3)
    for n in range(7):
        transport.send(envelope(n))
    assert tls_server.connections == 3
    assert tls_server.handler.logins == [(b"ada", b"s3cret")] * 3
    assert subjects(tls_server) == [f"Mail {n}" for n in range(7)]


def test_one_mail_per_session_is_a_connection_per_mail(smtp_server: SmtpTestServer) -> None:
    """``session_mails=1`` (the one-connection-per-mail way): no session is kept."""
    transport = SmtpTransport.from_url(smtp_server.url, session_mails=1)
    for n in range(3):
        transport.send(envelope(n))
    assert smtp_server.connections == 3
    assert len(transport.sessions) == 0
    assert smtp_server.handler.rset_commands == 0


def test_the_idle_bound_opens_a_new_session(smtp_server: SmtpTestServer) -> None:
    """A session idle for at most ``session_idle`` is reused; one idle longer is closed and a
    new one opened (the clock is the test's)."""
    clock = ManualClock(1000.0)
    transport = SmtpTransport(
        "127.0.0.1", smtp_server.port, session_idle=30.0, clock=clock, sleep=no_sleep
    )
    transport.send(envelope(0))
    clock.advance(30.0)
    transport.send(envelope(1))
    assert smtp_server.connections == 1
    clock.advance(30.5)
    transport.send(envelope(2))
    assert smtp_server.connections == 2
    assert subjects(smtp_server) == ["Mail 0", "Mail 1", "Mail 2"]


def test_a_session_the_server_dropped_between_mails_loses_and_doubles_nothing(
    tls_server: SmtpTestServer, test_certificate: TestCertificate
) -> None:
    """The server closes the idle connections after each mail: every next mail finds its
    session dead (RSET), opens another at once (not a retry: one attempt) and is delivered
    once."""
    transport = tls_transport(tls_server, test_certificate)
    for n in range(4):
        receipt = transport.send(envelope(n))
        assert receipt.attempts == 1
        tls_server.drop_sessions()
    assert subjects(tls_server) == [f"Mail {n}" for n in range(4)]
    assert tls_server.connections == 4
    assert tls_server.handler.data_commands == 4


def test_a_session_dropped_at_mail_from_is_replaced_before_data(
    smtp_server: SmtpTestServer,
) -> None:
    """The server answers RSET, then drops the connection at the next command (MAIL FROM):
    nothing of the mail went out, so it goes on a fresh connection at once, delivered once."""
    transport = SmtpTransport("127.0.0.1", smtp_server.port, sleep=no_sleep)
    transport.send(envelope(0))
    smtp_server.drop_after_reset()
    receipt = transport.send(envelope(1))
    assert receipt.attempts == 1
    assert subjects(smtp_server) == ["Mail 0", "Mail 1"]
    assert smtp_server.connections == 2
    assert smtp_server.handler.data_commands == 2


def test_a_session_that_dies_after_data_began_is_retried_as_any_connection(
    smtp_server: SmtpTestServer,
) -> None:
    """On a reused session the connection drops at DATA (before accepting): today's rule, a
    retry that counts as an attempt; the mail arrives once."""
    transport = SmtpTransport("127.0.0.1", smtp_server.port, sleep=no_sleep)
    transport.send(envelope(0))
    smtp_server.drop_connection()
    receipt = transport.send(envelope(1))
    assert receipt.attempts == 2
    assert subjects(smtp_server) == ["Mail 0", "Mail 1"]
    assert smtp_server.connections == 2


def test_a_refused_recipient_keeps_the_session(smtp_server: SmtpTestServer) -> None:
    """A 550 to RCPT ends that mail (permanent), not the session: the next mail reuses it."""
    transport = SmtpTransport("127.0.0.1", smtp_server.port, sleep=no_sleep)
    smtp_server.fail_rcpt("550 5.1.1 user unknown")
    with pytest.raises(Exception, match="refused"):
        transport.send(envelope(0))
    transport.send(envelope(1))
    assert subjects(smtp_server) == ["Mail 1"]
    assert smtp_server.connections == 1


def test_a_forked_child_never_uses_its_parents_session(smtp_server: SmtpTestServer) -> None:
    """After a fork the child opens its own connection; the parent's session still works."""
    transport = SmtpTransport("127.0.0.1", smtp_server.port, sleep=no_sleep)
    transport.send(envelope(0))
    pid = os.fork()
    if pid == 0:  # the child: send one mail, report by the exit code only
        code = 1
        try:
            transport.send(envelope(1))
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    transport.send(envelope(2))
    assert subjects(smtp_server) == ["Mail 0", "Mail 1", "Mail 2"]
    assert smtp_server.connections == 2  # the parent's one, the child's one
    assert smtp_server.handler.rset_commands == 1  # the parent's reuse; the child reused none


def test_threads_never_share_a_session(smtp_server: SmtpTestServer) -> None:
    """Four threads sending at once each get a session of their own; every mail arrives once
    and no more connections are opened than threads."""
    transport = SmtpTransport("127.0.0.1", smtp_server.port, sleep=no_sleep)
    errors: list[BaseException] = []

    def send(first: int) -> None:
        try:
            for n in range(first, first + 5):
                transport.send(envelope(n))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(10 * t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(subjects(smtp_server)) == sorted(
        f"Mail {10 * t + n}" for t in range(4) for n in range(5)
    )
    assert 1 <= smtp_server.connections <= 4
