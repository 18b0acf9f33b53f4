"""Transports: SMTP against a real aiosmtpd server, the memory and the console transports."""

from __future__ import annotations

import io
import logging
import pickle
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devservers.ports import free_port
from devservers.smtp_server import SmtpTestServer, TestCertificate
from mailer.errors import MailguardError, PermanentSendError, SendError, TransientSendError
from mailer.mail.envelope import Envelope, envelope_of
from mailer.mail.message import Mail
from mailer.mail.replies import Action, Reaction
from mailer.mail.transports import (
    ConsoleTransport,
    MemoryTransport,
    SendReceipt,
    SmtpTransport,
    Transport,
)
from mailer.mail.transports.base import mask_addresses, recipient_hash
from mailer.mail.transports.retrying import worth_retrying

# Re-exported so pytest finds the fixtures here until tests/conftest.py imports them.

RECIPIENT = "ada.lovelace@example.com"
MAIL_ID = "0b8e2a5c-6f1e-4c57-9d0c-2a4f7e1b9c33"


class Sleeps:
    """An injected sleep that records the waits instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    """A fresh recording sleep per test."""
    return Sleeps()


def _envelope(to: str = RECIPIENT, mail_id: str = MAIL_ID, html: str | None = None) -> Envelope:
    return envelope_of(
        Mail(
            to=to,
            subject="Your code",
            body="Your code is 482913\n",
            mail_id=mail_id,
            sender="Mailguard <noreply@sender.example>",
            html=html,
        )
    )


def _transport(url: str, sleeps: Sleeps, **options: object) -> SmtpTransport:
    return SmtpTransport.from_url(url, sleep=sleeps, **options)  # type: ignore[arg-type]


# --- SMTP against the real server -------------------------------------------------------------


def test_smtp_250_delivers_exactly_one_mail(smtp_server: SmtpTestServer, sleeps: Sleeps) -> None:
    """A 250 reply gives a receipt after one attempt and the server holds exactly one mail."""
    receipt = _transport(smtp_server.url, sleeps).send(_envelope())
    assert receipt.code == 250
    assert receipt.attempts == 1
    assert "accepted" in receipt.reply
    assert len(smtp_server.delivered) == 1
    delivered = smtp_server.delivered[0]
    assert delivered.rcpt_tos == (RECIPIENT,)
    assert delivered.mail_from == "noreply@sender.example"
    assert sleeps.waits == []


def test_smtp_message_id_arrives_intact(smtp_server: SmtpTestServer, sleeps: Sleeps) -> None:
    """The Message-ID derived from the mail id is the one the server receives."""
    receipt = _transport(smtp_server.url, sleeps).send(_envelope())
    expected = f"<{MAIL_ID}@sender.example>"
    assert receipt.message_id == expected
    assert smtp_server.delivered[0].message["Message-ID"] == expected


def test_smtp_html_mail_arrives_as_multipart_alternative(
    smtp_server: SmtpTestServer, sleeps: Sleeps
) -> None:
    """A mail with HTML reaches the server as multipart/alternative with both parts."""
    _transport(smtp_server.url, sleeps).send(_envelope(html="<p>Your code is 482913</p>"))
    received = smtp_server.delivered[0].message
    assert received.get_content_type() == "multipart/alternative"
    html = received.get_body(preferencelist=("html",))
    assert html is not None
    assert "482913" in html.get_content()


def test_smtp_451_twice_then_250_delivers_once_after_three_attempts(
    smtp_server: SmtpTestServer, sleeps: Sleeps
) -> None:
    """Two 451 replies to DATA are retried; the third try delivers exactly one mail."""
    smtp_server.fail_data("451 4.3.0 try later", times=2)
    receipt = _transport(smtp_server.url, sleeps).send(_envelope())
    assert receipt.attempts == 3
    assert len(smtp_server.delivered) == 1
    assert smtp_server.handler.data_commands == 3
    assert len(sleeps.waits) == 2


def test_smtp_waits_are_random_exponential_and_capped(
    smtp_server: SmtpTestServer, sleeps: Sleeps
) -> None:
    """Each wait lies between 0 and min(wait_max, wait_multiplier * 2**n) seconds."""
    smtp_server.fail_data(times=4)
    transport = _transport(smtp_server.url, sleeps, wait_multiplier=0.5, wait_max=1.5)
    transport.send(_envelope())
    assert len(sleeps.waits) == 4
    for n, wait in enumerate(sleeps.waits, start=1):
        assert 0 <= wait <= min(1.5, 0.5 * 2**n)


def test_smtp_451_at_rcpt_is_retried_then_delivered(
    smtp_server: SmtpTestServer, sleeps: Sleeps
) -> None:
    """A 4xx refusal of the recipient (SMTPRecipientsRefused) is retried, then delivered once."""
    smtp_server.fail_rcpt("451 4.2.1 mailbox busy", times=1)
    receipt = _transport(smtp_server.url, sleeps).send(_envelope())
    assert receipt.attempts == 2
    assert smtp_server.handler.rcpt_commands == 2
    assert len(smtp_server.delivered) == 1


def test_smtp_550_at_data_fails_permanently_after_one_attempt(
    smtp_server: SmtpTestServer, sleeps: Sleeps
) -> None:
    """A 5xx reply to DATA raises PermanentSendError at once; nothing is delivered."""
    smtp_server.refuse_data("550 5.7.1 no")
    with pytest.raises(PermanentSendError) as info:
        _transport(smtp_server.url, sleeps).send(_envelope())
    assert info.value.code == 550
    assert info.value.reply == "5.7.1 no"
    assert info.value.attempts == 1
    assert smtp_server.handler.data_commands == 1
    assert smtp_server.delivered == []
    assert sleeps.waits == []


def test_smtp_550_at_rcpt_fails_permanently_without_echoing_the_address(
    smtp_server: SmtpTestServer, sleeps: Sleeps
) -> None:
    """A 5xx refusal of the recipient is permanent; the address in the reply is masked."""
    smtp_server.fail_rcpt(f"550 5.1.1 <{RECIPIENT.upper()}>: no such user", times=5)
    with pytest.raises(PermanentSendError) as info:
        _transport(smtp_server.url, sleeps).send(_envelope())
    assert info.value.code == 550
    assert info.value.attempts == 1
    assert "lovelace" not in str(info.value).lower()
    assert "[recipient]" in info.value.reply
    assert smtp_server.delivered == []


def test_smtp_retries_run_out_with_transient_error(
    smtp_server: SmtpTestServer, sleeps: Sleeps
) -> None:
    """Persistent 451 replies stop after ``max_attempts`` with TransientSendError and the code."""
    smtp_server.fail_data("451 4.3.0 try later", times=10)
    with pytest.raises(TransientSendError) as info:
        _transport(smtp_server.url, sleeps, max_attempts=3).send(_envelope())
    assert info.value.code == 451
    assert info.value.attempts == 3
    assert "after 3 attempts" in str(info.value)
    assert smtp_server.handler.data_commands == 3
    assert smtp_server.delivered == []


def test_smtp_server_down_is_transient(sleeps: Sleeps) -> None:
    """A refused connection is retried and ends in TransientSendError without an SMTP code."""
    port = free_port()
    with pytest.raises(TransientSendError) as info:
        _transport(f"smtp://127.0.0.1:{port}", sleeps, max_attempts=3).send(_envelope())
    assert info.value.code is None
    assert info.value.attempts == 3
    assert "Connection" in str(info.value)
    assert len(sleeps.waits) == 2


def test_smtp_server_stopped_mid_test_is_transient(
    smtp_server: SmtpTestServer, sleeps: Sleeps
) -> None:
    """After the server stops, sends fail transiently; before, they worked."""
    transport = _transport(smtp_server.url, sleeps, max_attempts=2)
    transport.send(_envelope())
    smtp_server.stop()
    with pytest.raises(TransientSendError):
        transport.send(_envelope())
    assert len(smtp_server.delivered) == 1


@pytest.fixture
def hanging_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts connections and never says a word."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.05)  # so the thread notices ``stop`` quickly
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join(timeout=5)
    listener.close()
    for conn in accepted:
        conn.close()


def test_smtp_timeout_is_transient(hanging_server: int, sleeps: Sleeps) -> None:
    """A server that never greets times out; the timeout is retried and ends transient."""
    url = f"smtp://127.0.0.1:{hanging_server}?timeout=0.2"
    with pytest.raises(TransientSendError) as info:
        _transport(url, sleeps, max_attempts=2).send(_envelope())
    assert info.value.attempts == 2
    assert "timed out" in str(info.value)


def test_smtp_dropped_connection_is_transient(sleeps: Sleeps) -> None:
    """A server that closes the connection at once gives SMTPServerDisconnected, retried."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = int(listener.getsockname()[1])

    def hang_up(times: int) -> None:
        for _ in range(times):
            conn, _ = listener.accept()
            conn.close()

    thread = threading.Thread(target=hang_up, args=(2,), daemon=True)
    thread.start()
    try:
        with pytest.raises(TransientSendError) as info:
            _transport(f"smtp://127.0.0.1:{port}", sleeps, max_attempts=2).send(_envelope())
    finally:
        thread.join(timeout=5)
        listener.close()
    assert info.value.attempts == 2
    assert "SMTPServerDisconnected" in str(info.value)


def test_smtp_login_uses_url_decoded_credentials(sleeps: Sleeps) -> None:
    """User and password from the URL are percent-decoded before AUTH, and the mail goes out."""
    with SmtpTestServer(credentials=("ada@corp", "p@ss:w/rd")) as server:
        url = f"smtp://ada%40corp:p%40ss%3Aw%2Frd@127.0.0.1:{server.port}"
        receipt = _transport(url, sleeps).send(_envelope())
        assert receipt.code == 250
        assert server.handler.logins == [(b"ada@corp", b"p@ss:w/rd")]
        assert len(server.delivered) == 1


def test_smtp_bad_password_is_permanent_and_never_shown(sleeps: Sleeps) -> None:
    """A 535 login refusal is permanent; neither the error nor the repr shows the password."""
    with SmtpTestServer(credentials=("ada", "right")) as server:
        transport = _transport(f"smtp://ada:wrong-secret@127.0.0.1:{server.port}", sleeps)
        with pytest.raises(PermanentSendError) as info:
            transport.send(_envelope())
        assert info.value.code == 535
        assert info.value.attempts == 1
        assert "wrong-secret" not in str(info.value)
        assert "wrong-secret" not in repr(transport)
        assert server.delivered == []


def test_smtp_starttls_without_server_support_is_permanent(
    smtp_server: SmtpTestServer, sleeps: Sleeps
) -> None:
    """Asking for STARTTLS from a server that does not offer it fails at once, never in clear."""
    with pytest.raises(PermanentSendError, match="STARTTLS") as info:
        _transport(smtp_server.url + "?starttls=1", sleeps).send(_envelope())
    assert info.value.attempts == 1
    assert smtp_server.delivered == []


@pytest.mark.parametrize(("tls", "scheme"), [("implicit", "smtps"), ("starttls", "smtp+starttls")])
def test_smtp_tls_modes_deliver_and_log_in(
    tls: Literal["implicit", "starttls"],
    scheme: str,
    test_certificate: TestCertificate,
    sleeps: Sleeps,
) -> None:
    """smtps:// (implicit TLS) and STARTTLS both log in over TLS and deliver one mail."""
    with SmtpTestServer(("ada", "s3cret"), tls=tls, cert=test_certificate) as server:
        transport = SmtpTransport.from_url(
            f"{scheme}://ada:s3cret@127.0.0.1:{server.port}",
            sleep=sleeps,
            ssl_context=test_certificate.client_context(),
        )
        receipt = transport.send(_envelope())
        assert receipt.code == 250
        assert server.handler.logins == [(b"ada", b"s3cret")]
        assert len(server.delivered) == 1


@pytest.mark.parametrize(("tls", "scheme"), [("implicit", "smtps"), ("starttls", "smtp+starttls")])
def test_smtp_untrusted_certificate_is_permanent(
    tls: Literal["implicit", "starttls"],
    scheme: str,
    test_certificate: TestCertificate,
    sleeps: Sleeps,
) -> None:
    """A certificate the client does not trust fails at once, nothing is sent or retried."""
    with SmtpTestServer(tls=tls, cert=test_certificate) as server:
        transport = SmtpTransport.from_url(f"{scheme}://127.0.0.1:{server.port}", sleep=sleeps)
        with pytest.raises(PermanentSendError, match="CERTIFICATE_VERIFY_FAILED") as info:
            transport.send(_envelope())
        assert info.value.attempts == 1
        assert server.delivered == []


def test_smtp_international_recipient_uses_smtputf8(
    smtp_server: SmtpTestServer, sleeps: Sleeps
) -> None:
    """A non-ASCII local part is delivered with SMTPUTF8 and arrives unchanged."""
    _transport(smtp_server.url, sleeps).send(_envelope(to="jörg@bücher.ch"))
    assert smtp_server.delivered[0].rcpt_tos == ("jörg@bücher.ch",)


def test_smtp_logs_never_contain_the_recipient(
    smtp_server: SmtpTestServer, sleeps: Sleeps, caplog: pytest.LogCaptureFixture
) -> None:
    """Retry and failure log lines name the Message-ID, never the recipient address."""
    smtp_server.fail_rcpt(f"451 4.2.1 <{RECIPIENT}> busy", times=1)
    smtp_server.refuse_data(f"554 5.6.0 rejected for {RECIPIENT}")
    with (
        caplog.at_level(logging.WARNING, logger="mailer.mail.transports.smtp"),
        pytest.raises(PermanentSendError),
    ):
        _transport(smtp_server.url, sleeps).send(_envelope())
    ours = [r.getMessage() for r in caplog.records if r.name == "mailer.mail.transports.smtp"]
    assert len(ours) == 2
    assert all(MAIL_ID in line for line in ours)
    assert "lovelace" not in " ".join(ours).lower()


def test_smtp_message_without_recipient_is_refused_without_connecting(sleeps: Sleeps) -> None:
    """An envelope with no recipient fails permanently before any connection is made, whatever
    the message's To header shows."""
    envelope = replace(_envelope(), to=())
    assert envelope.message["To"] == RECIPIENT
    with pytest.raises(PermanentSendError, match="no recipient"):
        _transport(f"smtp://127.0.0.1:{free_port()}", sleeps).send(envelope)


# --- URLs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "security", "port", "timeout"),
    [
        ("smtp://mail.example", "plain", 25, 30.0),
        ("smtp://mail.example:2525?timeout=5", "plain", 2525, 5.0),
        ("smtps://mail.example", "ssl", 465, 30.0),
        ("smtp+starttls://mail.example", "starttls", 587, 30.0),
        ("smtp://mail.example:587?starttls=1", "starttls", 587, 30.0),
        ("smtp://mail.example?starttls=0", "plain", 25, 30.0),
        ("smtp://[::1]:2525", "plain", 2525, 30.0),
    ],
)
def test_from_url_reads_scheme_port_and_options(
    url: str, security: str, port: int, timeout: float
) -> None:
    """Schemes choose TLS mode and default port; query options set STARTTLS and timeout."""
    transport = SmtpTransport.from_url(url)
    assert (transport.security, transport.port, transport.timeout) == (security, port, timeout)


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("http://mail.example", "scheme"),
        ("smtp://", "no host"),
        ("smtp://mail.example:port", "port"),
        ("smtps://mail.example?starttls=1", "already uses TLS"),
        ("smtp://mail.example?starttls=maybe", "starttls must be"),
        ("smtp://mail.example?timeout=-1", "timeout"),
        ("smtp://mail.example?retries=3", "unknown option 'retries'"),
    ],
)
def test_from_url_refuses_bad_urls(url: str, match: str) -> None:
    """Bad SMTP URLs raise ValueError saying which part is wrong."""
    with pytest.raises(ValueError, match=match):
        SmtpTransport.from_url(url)


def test_from_url_errors_mask_the_password() -> None:
    """A bad URL's error message shows the password as ***."""
    with pytest.raises(ValueError) as info:
        SmtpTransport.from_url("smtp://ada:hunter2@mail.example?bogus=1")
    assert "hunter2" not in str(info.value)
    assert "***" in str(info.value)


# --- errors ------------------------------------------------------------------------------------


def test_send_errors_survive_pickling() -> None:
    """Code, reply and attempts come back after a pickle round trip (result backends)."""
    error = TransientSendError("deferred", code=451, reply="later", attempts=3)
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 (bytes we just made)
    assert (type(copy), copy.code, copy.reply, copy.attempts) == (
        TransientSendError,
        451,
        "later",
        3,
    )
    assert str(copy) == str(error)


@pytest.mark.parametrize("stage", ["rcpt", "data"])
@pytest.mark.parametrize(
    ("reply", "error"),
    [("451 4.3.0 try later", TransientSendError), ("550 5.7.1 refused", PermanentSendError)],
)
def test_one_except_clause_catches_every_smtp_refusal_with_its_reply(
    smtp_server: SmtpTestServer,
    sleeps: Sleeps,
    stage: str,
    reply: str,
    error: type[SendError],
) -> None:
    """What the real server's 4xx or 5xx makes the transport raise is caught by ``except
    SendError`` and by ``except MailguardError``, with the SMTP code, reply text and attempts."""
    refuse = smtp_server.fail_rcpt if stage == "rcpt" else smtp_server.fail_data
    refuse(reply, times=10)
    transport = _transport(smtp_server.url, sleeps, max_attempts=2)
    caught: list[SendError] = []
    try:
        transport.send(_envelope())
    except SendError as exc:  # what the guard catches
        caught.append(exc)
    try:
        transport.send(_envelope())
    except MailguardError as exc:  # what a caller of the whole library may catch
        assert isinstance(exc, SendError)
        caught.append(exc)
    assert [type(exc) for exc in caught] == [error, error]
    attempts = 2 if error is TransientSendError else 1  # a 5xx is never retried
    code, text = reply.split(" ", 1)
    for exc in caught:
        assert (exc.code, exc.reply, exc.attempts) == (int(code), text, attempts)
    assert smtp_server.delivered == []


def test_mask_addresses_is_case_insensitive() -> None:
    """Every spelling of a recipient in a reply is masked."""
    assert mask_addresses("550 <ADA@Example.com> unknown", ["ada@example.com"]) == (
        "550 <[recipient]> unknown"
    )


def _masked_by_patterns(text: str, addresses: list[str]) -> str:
    """The reference: one case-insensitive pattern per address, longest first."""
    for address in sorted(set(addresses), key=len, reverse=True):
        if address:
            text = re.sub(re.escape(address), "[recipient]", text, flags=re.IGNORECASE)
    return text


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(alphabet="aAsSkK\u017f\u212a\u0130i@.\u00df\u1e9e<> 5", max_size=8), max_size=3
    ),
    st.text(alphabet="aAsSkK\u017f\u212a\u0130i@.\u00df\u1e9e<> 5", max_size=30),
)
def test_mask_addresses_masks_what_a_pattern_per_address_masks(
    addresses: list[str], text: str
) -> None:
    """The quick test before each pattern (an ASCII address absent from an ASCII text) changes
    no answer, with characters whose cases fold unevenly (long s, Kelvin sign, dotted I, ß)."""
    assert mask_addresses(text, addresses) == _masked_by_patterns(text, addresses)


# --- memory and console ------------------------------------------------------------------------


def _send_through_the_protocol(transport: object, envelope: Envelope) -> SendReceipt:
    """What the guard does with a transport: it knows only the ``Transport`` protocol."""
    assert isinstance(transport, Transport)
    return transport.send(envelope)


@pytest.mark.parametrize(
    "name", ["memory", "console", pytest.param("smtp", marks=pytest.mark.server)]
)
def test_each_transport_delivers_a_message_through_the_protocol(
    name: str, sleeps: Sleeps, request: pytest.FixtureRequest
) -> None:
    """Memory, console and SMTP (to the real test server), used only as a ``Transport``, each
    hand the message over once and return a 250 receipt carrying its Message-ID."""
    message = _envelope(mail_id=f"proto-{name}")
    expected_id = f"<proto-{name}@sender.example>"
    if name == "memory":
        memory = MemoryTransport()
        receipt = _send_through_the_protocol(memory, message)
        assert [m["Message-ID"] for m in memory.sent] == [expected_id]
        assert memory.sent[0].get_content().splitlines() == ["Your code is 482913"]
    elif name == "console":
        stream = io.StringIO()
        receipt = _send_through_the_protocol(ConsoleTransport(stream), message)
        assert stream.getvalue().count("\n") == 1
        assert f"message-id={expected_id}" in stream.getvalue()
        assert f"to={recipient_hash(RECIPIENT)}" in stream.getvalue()
    else:
        server: SmtpTestServer = request.getfixturevalue("smtp_server")
        receipt = _send_through_the_protocol(_transport(server.url, sleeps), message)
        [delivered] = server.delivered
        assert delivered.rcpt_tos == (RECIPIENT,)
        assert delivered.message["Message-ID"] == expected_id
        assert delivered.message.get_content().splitlines() == ["Your code is 482913"]
    assert (receipt.message_id, receipt.code, receipt.attempts) == (expected_id, 250, 1)


def test_memory_transport_keeps_sent_messages() -> None:
    """Sent messages are kept in order and returned as a copy."""
    transport = MemoryTransport()
    receipt = transport.send(_envelope(mail_id="m1"))
    transport.send(_envelope(mail_id="m2"))
    assert receipt.code == 250
    assert [m["Message-ID"] for m in transport.sent] == [
        "<m1@sender.example>",
        "<m2@sender.example>",
    ]
    transport.sent.clear()
    assert len(transport.sent) == 2


def test_memory_transport_fails_the_next_n_sends() -> None:
    """Planned failures come first, transient or permanent, then sends work again."""
    transport = MemoryTransport()
    transport.fail_next(2)
    transport.fail_next(1, permanent=True)
    with pytest.raises(TransientSendError):
        transport.send(_envelope())
    with pytest.raises(TransientSendError) as transient:
        transport.send(_envelope())
    with pytest.raises(PermanentSendError) as permanent:
        transport.send(_envelope())
    transport.send(_envelope())
    assert (transient.value.code, permanent.value.code) == (451, 550)
    assert transport.attempts == 4
    assert len(transport.sent) == 1


def test_memory_transport_is_thread_safe() -> None:
    """Sends from many threads are all kept, none lost."""
    transport = MemoryTransport()
    message = _envelope()

    def send_many() -> None:
        for _ in range(100):
            transport.send(message)

    threads = [threading.Thread(target=send_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(transport.sent) == 800
    assert transport.attempts == 800


def test_console_transport_prints_a_summary_without_the_address() -> None:
    """The console line has the Message-ID, subject and recipient hash, not the address."""
    stream = io.StringIO()
    receipt = ConsoleTransport(stream).send(_envelope())
    line = stream.getvalue()
    assert receipt.code == 250
    assert f"<{MAIL_ID}@sender.example>" in line
    assert "Your code" in line
    assert recipient_hash(RECIPIENT) in line
    assert "lovelace" not in line.lower()
    assert line.count("\n") == 1


def test_recipient_hash_ignores_case_and_whitespace() -> None:
    """The log hash of an address does not depend on its case or surrounding spaces."""
    assert recipient_hash(" Ada@Example.com ") == recipient_hash("ada@example.com")
    assert len(recipient_hash("ada@example.com")) == 12


# --- what is worth another try at once ---------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "at_once", "with_holds_retried"),
    [
        (TransientSendError("connection dropped"), True, True),
        (TransientSendError("x", code=451, reply="4.3.0 try later"), True, True),
        (TransientSendError("x", code=454, reply="Throttling failure: rate exceeded"), False, True),
        (TransientSendError("x", code=450, reply="4.2.0 greylisted"), False, True),
        (TransientSendError("x", reaction=Reaction(Action.HOLD_SENDER)), False, True),
        (PermanentSendError("x", code=550, reply="5.1.1 user unknown"), False, False),
    ],
)
def test_one_rule_says_what_is_worth_retrying_at_once(
    error: SendError, at_once: bool, with_holds_retried: bool
) -> None:
    """Every transport retries at once a transient error that asks for no delay (``RETRY``);
    a hold or a greylisting delay is the guard's, unless the SMTP transport retries holds
    itself (``retry_holds``); a permanent error never."""
    assert worth_retrying(error) is at_once
    assert worth_retrying(error, retry_holds=True) is with_holds_retried
