"""devservers.postfix and devservers.postgrey, spoken to with ``smtplib`` alone: an instance of
its own delivers into Maildirs, refuses unknown users at RCPT, counts its queue, offers AUTH
only after STARTTLS and checks it against its own sasldb, applies anvil's limits to loopback,
greylists through its own postgrey, and stops by pid (nothing of it left) and starts again on
its port with its mailboxes."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator

import pytest

from devservers import postfix
from devservers.postfix import PostfixRelay
from devservers.postgrey import GREYLISTED
from devservers.smtp_server import TestCertificate
from tests.waiting import poll

pytestmark = pytest.mark.server

LOGIN, PASSWORD = "client", "pass-word"
MESSAGE = b"Subject: devserver\r\nMessage-ID: <m-%d@example.org>\r\n\r\nbody\r\n"


@pytest.fixture(scope="module")
def relay(test_certificate: TestCertificate) -> Iterator[PostfixRelay]:
    with PostfixRelay(("ada", "bob"), cert=test_certificate, logins={LOGIN: PASSWORD}) as relay:
        yield relay


def _client(relay: PostfixRelay, cert: TestCertificate) -> smtplib.SMTP:
    client = smtplib.SMTP("127.0.0.1", relay.port, timeout=10)
    client.starttls(context=cert.client_context())
    client.login(LOGIN, PASSWORD)
    return client


def test_a_logged_in_client_delivers_into_the_maildir(
    relay: PostfixRelay, test_certificate: TestCertificate
) -> None:
    """A message to ada lands in her Maildir as Postfix wrote it (its Return-Path first);
    bob's Maildir stays empty; the queue is empty once it is delivered."""
    with _client(relay, test_certificate) as client:
        assert client.sendmail("s@example.org", ["ada@example.com"], MESSAGE % 1) == {}
    poll(lambda: relay.maildir("ada"), 15, "the message in ada's Maildir")
    [raw] = relay.maildir("ada")
    assert raw.startswith(b"Return-Path: <s@example.org>") and b"<m-1@example.org>" in raw
    assert relay.maildir("bob") == [] and relay.queued() == 0


def test_an_unknown_user_is_refused_at_rcpt(
    relay: PostfixRelay, test_certificate: TestCertificate
) -> None:
    with (
        _client(relay, test_certificate) as client,
        pytest.raises(smtplib.SMTPRecipientsRefused) as refused,
    ):
        client.sendmail("s@example.org", ["zed@example.com"], MESSAGE % 2)
    [(code, text)] = refused.value.recipients.values()
    assert f"{code} {text.decode()}".startswith(postfix.UNKNOWN_USER), text
    assert relay.logged("550 5.1.1 <zed@example.com>") == 1


def test_auth_only_after_starttls_and_only_with_the_password(
    relay: PostfixRelay, test_certificate: TestCertificate
) -> None:
    """Before STARTTLS no AUTH is offered and mail is refused; after it a wrong password gets
    ``535 5.7.8``; the right one is taken (PLAIN and LOGIN offered, nothing else)."""
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=10) as client:
        client.ehlo()
        assert not client.has_extn("auth") and client.has_extn("starttls")
        with pytest.raises(smtplib.SMTPRecipientsRefused):
            client.sendmail("s@example.org", ["bob@example.com"], MESSAGE % 3)
        client.rset()
        client.starttls(context=test_certificate.client_context())
        client.ehlo()
        assert client.esmtp_features["auth"].split() == ["PLAIN", "LOGIN"]
        with pytest.raises(smtplib.SMTPAuthenticationError) as wrong:
            client.login(LOGIN, "not-it")
        assert wrong.value.smtp_code == 535 and wrong.value.smtp_error.startswith(b"5.7.8")
        assert client.login(LOGIN, PASSWORD)[0] == 235
    assert relay.maildir("bob") == []


def test_a_deferred_message_is_counted_in_the_queue(
    relay: PostfixRelay, test_certificate: TestCertificate
) -> None:
    """The mailboxes unwritable: Postfix takes the message and defers it (``queued`` 1); once
    writable again a flush delivers it (``queued`` 0)."""
    base = relay.dir / "mail"
    base.chmod(0o000)
    try:
        with _client(relay, test_certificate) as client:
            client.sendmail("s@example.org", ["bob@example.com"], MESSAGE % 4)
        poll(lambda: "status=deferred" in relay.log(), 15, "the delivery to be deferred")
        assert relay.queued() == 1
    finally:
        base.chmod(0o755)
    relay.flush()
    poll(lambda: relay.maildir("bob"), 15, "the deferred message to arrive")
    poll(lambda: relay.queued() == 0, 10, "the queue to empty")


def test_stop_leaves_nothing_and_start_keeps_the_port_and_mailboxes(
    relay: PostfixRelay, test_certificate: TestCertificate
) -> None:
    """Stopped: no process of the instance, nothing listens on its port, ``queued`` 0. Started
    again: a new master on the same port, ada's earlier messages still there, a new one added."""
    with _client(relay, test_certificate) as client:
        client.sendmail("s@example.org", ["ada@example.com"], MESSAGE % 10)
    poll(lambda: b"<m-10@example.org>" in b"".join(relay.maildir("ada")), 15, "ada's message")
    kept = relay.maildir("ada")
    first = relay.master_pid()
    assert first is not None and first in relay.processes()
    relay.stop()
    assert relay.master_pid() is None and relay.processes() == []
    assert not postfix.listening(relay.port) and relay.queued() == 0
    with pytest.raises(OSError):
        smtplib.SMTP("127.0.0.1", relay.port, timeout=2)
    relay.start()
    assert relay.master_pid() not in (None, first)
    with _client(relay, test_certificate) as client:
        client.sendmail("s@example.org", ["ada@example.com"], MESSAGE % 5)
    poll(lambda: len(relay.maildir("ada")) == len(kept) + 1, 15, "one more message for ada")
    assert relay.maildir("ada")[: len(kept)] == kept
    assert b"<m-5@example.org>" in relay.maildir("ada")[-1]


def test_anvil_limits_loopback_messages_and_connections() -> None:
    """Two mails and three connections per minute: the third MAIL FROM gets Postfix's ``450
    4.7.1 Error: too much mail from 127.0.0.1``, the fourth connection ``421 4.7.0 ... too many
    connections``; each refusal is in the log. ``start`` made no connection of its own."""
    with PostfixRelay(("ada",), message_rate_limit=2, connection_rate_limit=3) as relay:
        with smtplib.SMTP("127.0.0.1", relay.port, timeout=10) as client:
            client.sendmail("s@example.org", ["ada@example.com"], MESSAGE % 6)
            client.sendmail("s@example.org", ["ada@example.com"], MESSAGE % 7)
            with pytest.raises(smtplib.SMTPSenderRefused) as refused:
                client.sendmail("s@example.org", ["ada@example.com"], MESSAGE % 8)
        reply = f"{refused.value.smtp_code} {refused.value.smtp_error.decode()}"
        assert reply == postfix.TOO_MUCH_MAIL % "127.0.0.1"
        for _ in range(2):
            smtplib.SMTP("127.0.0.1", relay.port, timeout=10).quit()
        with pytest.raises(smtplib.SMTPConnectError) as closed:
            smtplib.SMTP("127.0.0.1", relay.port, timeout=10)
        assert f"{closed.value.smtp_code} {closed.value.smtp_error.decode()}" == (
            postfix.TOO_MANY_CONNECTIONS % "127.0.0.1"
        )
        logged = ("Message delivery request rate limit exceeded", "Connection rate limit exceeded")
        assert [relay.logged(line) for line in logged] == [1, 1]
        poll(lambda: len(relay.maildir("ada")) == 2, 15, "the two accepted mails")


def test_postgrey_greylists_a_new_triplet_then_lets_it_pass() -> None:
    """postgrey ``--delay=1``: the first RCPT gets ``450 4.2.0 ... Greylisted``; tried again
    (every 0.2 s) it passes once the delay is over, and the mail arrives; postgrey logged one
    greylisting and one pass. Stopped with the relay, postgrey's pid is gone."""
    with PostfixRelay(("ada",), greylist_delay=1) as relay:
        assert relay.postgrey is not None and relay.postgrey.process is not None
        replies: list[tuple[int, bytes]] = []

        def accepted() -> bool:
            with smtplib.SMTP("127.0.0.1", relay.port, timeout=10) as client:
                client.mail("s@example.org")
                replies.append(client.rcpt("ada@example.com"))
                if replies[-1][0] != 250:
                    return False
                client.data(MESSAGE % 9)
                return True

        poll(accepted, 15, "postgrey to let the triplet pass")
        code, text = replies[0]
        assert code == 450 and text.startswith(b"4.2.0 <ada@example.com>: Recipient address")
        assert GREYLISTED.encode() in text
        poll(lambda: relay.maildir("ada"), 15, "the mail to arrive")
        log = relay.postgrey.log()
        assert [log.count("action=greylist"), log.count("action=pass")] == [len(replies) - 1, 1]
        postgrey = relay.postgrey.process
        relay.stop()
        assert postgrey.poll() is not None and relay.postgrey.process is None
