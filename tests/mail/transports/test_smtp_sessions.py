"""SMTP sessions kept between mails, against a real aiosmtpd server (STARTTLS + AUTH where the
reuse is the point): one connection carries several mails, the count and the idle bounds open
another, a session the server dropped (or closed with a ``421``) is replaced without losing or
doubling a mail and found so without a command, a forked child never touches its parent's
connection. Connections are counted by the server."""

from __future__ import annotations

import os
import smtplib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from devservers.smtp_server import SmtpTestServer, TestCertificate
from mailer.clock import ManualClock
from mailer.mail.envelope import Envelope, envelope_of
from mailer.mail.message import Mail
from mailer.mail.transports import SmtpTransport
from mailer.mail.transports import smtp as smtp_module
from mailer.mail.transports.smtp_sessions import quiet


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
    """Ten mails: one connection, one STARTTLS, one AUTH, no command between mails (no RSET,
    no NOOP: a TLS session ticket does not look like a closed session), each mail delivered
    once, in order."""
    transport = tls_transport(tls_server, test_certificate)
    receipts = [transport.send(envelope(n)) for n in range(10)]
    assert [r.attempts for r in receipts] == [1] * 10
    assert subjects(tls_server) == [f"Mail {n}" for n in range(10)]
    assert tls_server.connections == 1
    assert tls_server.handler.logins == [(b"ada", b"s3cret")]
    assert len(tls_server.handler.peer_certs) == 1  # one TLS handshake
    assert tls_server.handler.rset_commands == tls_server.handler.noop_commands == 0
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
    session closed before it sends a command, opens another at once (not a retry: one attempt)
    and is delivered once."""
    transport = tls_transport(tls_server, test_certificate)
    for n in range(4):
        receipt = transport.send(envelope(n))
        assert receipt.attempts == 1
        tls_server.drop_sessions()
    assert subjects(tls_server) == [f"Mail {n}" for n in range(4)]
    assert tls_server.connections == 4
    assert tls_server.handler.data_commands == 4


def test_a_session_dropped_at_mail_from_is_replaced_before_data(
    smtp_server: SmtpTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session looked open when the mail took it, then the connection dropped (the server
    died after the check): MAIL FROM fails with no reply, nothing of the mail went out, so it
    goes on a fresh connection at once, delivered once."""
    transport = SmtpTransport("127.0.0.1", smtp_server.port, sleep=no_sleep)
    transport.send(envelope(0))
    smtp_server.drop_sessions()
    monkeypatch.setattr(smtp_module, "quiet", lambda client: True)
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


def test_a_quiet_session_is_one_whose_server_wrote_nothing() -> None:
    """``quiet`` asks the socket alone: nothing to read is quiet; a ``421`` the server wrote
    as it closes an idle session, an end of file or no socket at all is not; asking reads
    nothing from a quiet session."""
    client = smtplib.SMTP()
    assert not quiet(client)  # never connected
    ours, servers = socket.socketpair()
    with ours, servers:
        client.sock = ours
        assert quiet(client)
        assert quiet(client)  # asking twice changes nothing
        servers.sendall(b"421 4.4.2 relay.example Error: timeout exceeded\r\n")
        assert not quiet(client)
    other, closed = socket.socketpair()
    with other:
        client.sock = other
        closed.close()
        assert not quiet(client)
    client.sock = None


class ClosingRelay:
    """A minimal SMTP relay on loopback that says ``421`` on each connection a moment after it
    accepted a mail (as a relay closing an idle session), then neither reads nor closes it: a
    command sent there would be answered by that 421 (:meth:`after_421` tells what came).
    Counts its connections and the mails it accepted."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.mails: list[bytes] = []
        self.said_421: list[socket.socket] = []  # kept open until the end
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed: the test is over
                return
            self.connections += 1
            with conn.makefile("rb") as lines:
                self._session(conn, lines)

    def _session(self, conn: socket.socket, lines: object) -> None:
        conn.sendall(b"220 closing.test ESMTP\r\n")
        for line in lines:  # type: ignore[attr-defined]
            verb = line[:4].upper()
            if verb == b"DATA":
                conn.sendall(b"354 go ahead\r\n")
                body = b"".join(iter(lines.readline, b".\r\n"))  # type: ignore[attr-defined]
                self.mails.append(body)
                conn.sendall(b"250 2.0.0 queued\r\n")
                time.sleep(0.05)  # idle: then the relay's timeout
                conn.sendall(b"421 4.4.2 closing.test Error: timeout exceeded\r\n")
                self.said_421.append(conn)
                return
            conn.sendall(b"221 bye\r\n" if verb == b"QUIT" else b"250 ok\r\n")
            if verb == b"QUIT":
                break
        conn.close()

    def after_421(self) -> list[bytes]:
        """What each connection that was told 421 received since (``b""``: nothing, or QUIT)."""
        received = []
        for conn in self.said_421:
            conn.settimeout(0.5)
            try:
                data = conn.recv(4096)
            except TimeoutError:
                data = b""
            received.append(b"" if data.upper().startswith(b"QUIT") else data)
        return received

    def close(self) -> None:
        self.listener.close()
        for conn in self.said_421:
            conn.close()


def test_a_session_the_server_closed_with_421_is_replaced_without_a_try() -> None:
    """A relay that says ``421`` and closes an idle session: the next mail finds it so without
    a command (nothing but ``QUIT`` reaches that connection), opens another at once (one
    attempt), delivered once."""
    relay = ClosingRelay()
    try:
        transport = SmtpTransport("127.0.0.1", relay.port, sleep=no_sleep, max_attempts=1)
        for n in range(3):
            receipt = transport.send(envelope(n))
            assert receipt.attempts == 1
            time.sleep(0.2)  # the relay's 421 has come
        assert relay.connections == 3
        assert relay.after_421()[:2] == [b"", b""]
        assert [b"Subject: Mail %d" % n in mail for n, mail in enumerate(relay.mails)] == [True] * 3
        transport.close()
    finally:
        relay.close()
