"""The SMTP transport pipelines a mail's ``MAIL FROM``, ``RCPT TO`` and ``DATA`` (RFC 2920) when
the server offers ``PIPELINING``, with the same outcomes as one command at a time: each case
runs against a real aiosmtpd server both ways (``piped``: its EHLO offers PIPELINING). The
mails are delivered once, refusals and drops end as they do unpiped, a refusal keeps the
session and a ``421`` closes it. Postfix, which offers PIPELINING, runs the same path in
tests/relay."""

from __future__ import annotations

import smtplib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from devservers.smtp_server import SmtpTestServer
from mailer.errors import PermanentSendError, TransientSendError
from mailer.mail.envelope import Envelope, envelope_of
from mailer.mail.message import Mail
from mailer.mail.transports import SmtpTransport
from mailer.mail.transports.base import RefusedRecipient

ADA, BOB = "ada@example.com", "bob@example.com"
SENDER = "noreply@sender.example"


def envelope(
    n: int, to: str | tuple[str, ...] = ADA, body: str = "Your code is 482913\n"
) -> Envelope:
    return envelope_of(
        Mail(to=to, subject=f"Mail {n}", body=body, mail_id=f"mail-{n:04d}", sender=SENDER)
    )


@pytest.fixture(params=["piped", "unpiped"])
def server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An aiosmtpd server whose EHLO offers PIPELINING (``piped``) or not; piped, a mail that
    went through ``sendmail`` (one command at a time) fails the test."""
    piped = request.param == "piped"
    with SmtpTestServer() as found:
        if piped:
            plain_ehlo = found.handler.handle_EHLO

            async def ehlo(  # aiosmtpd tells its hook's kind by these five parameters
                server: Any, session: Any, envelope: Any, hostname: str, responses: list[str]
            ) -> list[str]:
                offered = await plain_ehlo(server, session, envelope, hostname, responses)
                return [*offered[:-1], "250-PIPELINING", offered[-1]]

            found.handler.handle_EHLO = ehlo  # type: ignore[method-assign]

            def unpiped(*args: object, **kwargs: object) -> None:
                raise AssertionError("sent one command at a time to a pipelining server")

            monkeypatch.setattr(smtplib.SMTP, "sendmail", unpiped)
        yield found


def transport_to(server: SmtpTestServer, **options: Any) -> SmtpTransport:
    return SmtpTransport("127.0.0.1", server.port, sleep=lambda _: None, **options)


def test_mails_on_one_connection_each_delivered_once(server: SmtpTestServer) -> None:
    """Three mails, one connection, each once, in order; a body line that starts with a dot
    arrives as written (the dot doubled on the wire, undone by the server)."""
    transport = transport_to(server)
    bodies = ["one\n", ".hidden line\n..two dots\n", "three"]
    receipts = [transport.send(envelope(n, body=body)) for n, body in enumerate(bodies)]
    assert [(r.code, r.attempts) for r in receipts] == [(250, 1)] * 3
    assert [str(d.message["Subject"]) for d in server.delivered] == ["Mail 0", "Mail 1", "Mail 2"]
    assert server.delivered[1].message.get_content().replace("\r\n", "\n") == bodies[1]
    assert server.connections == 1
    transport.close()


def test_one_recipient_refused_the_others_get_it(server: SmtpTestServer) -> None:
    """bob refused at RCPT: ada gets the mail, the receipt names bob, the session is kept."""
    server.fail_rcpt_for(BOB, "550 5.1.1 <bob@example.com>: user unknown")
    transport = transport_to(server)
    receipt = transport.send(envelope(0, to=(ADA, BOB)))
    assert receipt.refused == (RefusedRecipient(BOB, 550, "5.1.1 <[recipient]>: user unknown"),)
    assert [d.rcpt_tos for d in server.delivered] == [(ADA,)]
    transport.send(envelope(1))
    assert server.connections == 1


def test_every_recipient_refused_is_permanent_and_keeps_the_session(
    server: SmtpTestServer,
) -> None:
    """A 550 to the only recipient: permanent, nothing delivered; the next mail reuses the
    connection (the refusal ended the transaction, not the session)."""
    server.fail_rcpt("550 5.1.1 user unknown")
    transport = transport_to(server)
    with pytest.raises(PermanentSendError, match="550"):
        transport.send(envelope(0))
    transport.send(envelope(1))
    assert [str(d.message["Subject"]) for d in server.delivered] == ["Mail 1"]
    assert server.connections == 1


def test_a_451_at_rcpt_is_retried_and_delivered_once(server: SmtpTestServer) -> None:
    server.fail_rcpt("451 4.2.1 mailbox busy")
    receipt = transport_to(server).send(envelope(0))
    assert receipt.attempts == 2
    assert len(server.delivered) == 1


def test_a_421_at_rcpt_closes_the_session(server: SmtpTestServer) -> None:
    """A 421 to RCPT: the server is closing; transient, retried on a new connection."""
    server.fail_rcpt("421 4.7.0 closing")
    receipt = transport_to(server).send(envelope(0))
    assert receipt.attempts == 2
    assert len(server.delivered) == 1
    assert server.connections == 2


def test_a_failure_at_data_is_retried_and_delivered_once(server: SmtpTestServer) -> None:
    server.fail_data("451 4.3.0 try later", times=2)
    receipt = transport_to(server).send(envelope(0))
    assert receipt.attempts == 3
    assert len(server.delivered) == 1


def test_a_permanent_refusal_at_data(server: SmtpTestServer) -> None:
    server.fail_data("550 5.7.1 refused", times=1)
    transport = transport_to(server)
    with pytest.raises(PermanentSendError, match="550"):
        transport.send(envelope(0))
    assert server.delivered == []
    transport.send(envelope(1))
    assert server.connections == 1


def test_a_connection_dropped_at_data_is_retried(server: SmtpTestServer) -> None:
    """Dropped at DATA (nothing accepted): a retry, a try counted; delivered once."""
    transport = transport_to(server)
    transport.send(envelope(0))
    server.drop_connection()
    receipt = transport.send(envelope(1))
    assert receipt.attempts == 2
    assert [str(d.message["Subject"]) for d in server.delivered] == ["Mail 0", "Mail 1"]


def test_a_session_dropped_between_mails_is_replaced_without_a_try(
    server: SmtpTestServer,
) -> None:
    transport = transport_to(server)
    for n in range(3):
        assert transport.send(envelope(n)).attempts == 1
        server.drop_sessions()
    assert len(server.delivered) == 3
    assert server.connections == 3


def test_an_international_recipient_goes_with_smtputf8(server: SmtpTestServer) -> None:
    receipt = transport_to(server).send(envelope(0, to="José@example.com"))
    assert receipt.code == 250
    assert server.delivered[0].rcpt_tos == ("José@example.com",)


def test_retries_run_out_with_a_transient_error(server: SmtpTestServer) -> None:
    server.fail_rcpt("451 4.2.1 busy", times=10)
    with pytest.raises(TransientSendError):
        transport_to(server, max_attempts=3).send(envelope(0))
    assert server.delivered == []


_USUAL = {b"DATA": b"354 go ahead"}


class ScriptedRelay:
    """A relay on loopback that offers PIPELINING and answers each command with its verb's next
    reply in ``replies`` (else ``354`` to DATA, ``250`` to the rest), closing the connection
    after a ``421``. Keeps what each connection received."""

    def __init__(self, replies: dict[bytes, list[bytes]]) -> None:
        self.replies = replies
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received: list[list[bytes]] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            lines: list[bytes] = []
            self.received.append(lines)
            with conn, conn.makefile("rb") as stream:
                conn.sendall(b"220 scripted.test ESMTP\r\n")
                for line in stream:
                    lines.append(line)
                    verb = line[:4].upper()
                    queued = self.replies.get(verb)
                    reply = queued.pop(0) if queued else _USUAL.get(verb, b"250 ok")
                    if verb == b"EHLO":
                        reply = b"250-scripted.test\r\n250 PIPELINING"
                    if verb == b"QUIT":
                        reply = b"221 bye"
                    conn.sendall(reply + b"\r\n")
                    if reply.startswith((b"421", b"221")):
                        break
                    if reply.startswith(b"354"):
                        lines += iter(stream.readline, b".\r\n")
                        conn.sendall(b"250 2.0.0 queued\r\n")

    def close(self) -> None:
        self.listener.close()


def test_a_421_to_mail_from_then_closed_reports_the_421() -> None:
    """MAIL FROM answered ``421`` and the connection closed (RCPT and DATA unanswered): the
    error carries the server's 421, not a closed socket; the next mail is delivered."""
    relay = ScriptedRelay({b"MAIL": [b"421 4.7.0 scripted.test too busy"]})
    try:
        transport = SmtpTransport("127.0.0.1", relay.port, sleep=lambda _: None, max_attempts=1)
        with pytest.raises(TransientSendError, match=r"SMTPSenderRefused.*421 '4\.7\.0"):
            transport.send(envelope(0))
        assert transport.send(envelope(1)).code == 250
        assert [line[:4].upper() for line in relay.received[0]] == [b"EHLO", b"MAIL"]
    finally:
        relay.close()


def test_a_354_after_every_recipient_was_refused_keeps_the_session_in_step() -> None:
    """A server that answers ``354`` to DATA although it refused the only recipient (RFC 2920
    says it must not): the data section is ended empty (``.``), nothing of the mail is sent,
    the refusal is permanent, and the next mail on the same connection is delivered."""
    relay = ScriptedRelay({b"RCPT": [b"550 5.1.1 user unknown"], b"DATA": [b"354 go ahead"]})
    try:
        transport = SmtpTransport("127.0.0.1", relay.port, sleep=lambda _: None)
        with pytest.raises(PermanentSendError, match="550"):
            transport.send(envelope(0))
        assert transport.send(envelope(1)).code == 250
        assert len(relay.received) == 1  # one connection
        sent = b"".join(relay.received[0])
        assert b"Subject: Mail 0" not in sent and b"Subject: Mail 1" in sent
    finally:
        relay.close()
