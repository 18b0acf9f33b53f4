"""Delivery into a real Postfix through STARTTLS and SMTP AUTH (cyrus sasldb), by the library's
guard and by a Celery worker; an unknown user's ``550 5.1.1`` recorded and the address
suppressed. Each checked by what arrived in the relay's Maildirs.

Today's code has no CA setting: the library takes the test certificate as the transport's
``ssl_context``; the worker trusts it through OpenSSL's ``SSL_CERT_FILE`` (in the worker
process only).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devservers.postfix import PostfixRelay
from devservers.smtp_server import TestCertificate
from mailer import Limiter, Policy
from mailer.factory import memory_guard
from mailer.guard import Finish, GuardConfig, MailRequest
from mailer.mail.transports.smtp import SmtpTransport
from mailer.records.ledger import MemoryLedger
from mailer.records.suppression import suppressions_from_url
from tests.relay.stack import LOGIN, PASSWORD, RelayStack, message_ids, parsed, relay_stack
from tests.waiting import poll

pytestmark = [pytest.mark.server, pytest.mark.slow]


def _login_url(relay: PostfixRelay) -> str:
    return f"smtp://{LOGIN}:{PASSWORD}@127.0.0.1:{relay.port}?starttls=1&timeout=10"


@pytest.fixture(scope="module")
def tls_stack(tls_relay: PostfixRelay, test_certificate: TestCertificate) -> Iterator[RelayStack]:
    """A worker that logs in to ``tls_relay`` after STARTTLS, trusting the test certificate."""
    trust = {"SSL_CERT_FILE": str(test_certificate.cert)}
    with relay_stack(tls_relay, _login_url(tls_relay), process_env=trust) as stack:
        yield stack


def _arrived(relay: PostfixRelay, user: str, count: int = 1) -> list[bytes]:
    poll(lambda: len(relay.maildir(user)) >= count, 15, f"{count} mail(s) in {user}'s Maildir")
    return relay.maildir(user)


def test_the_library_delivers_through_starttls_and_auth(
    tls_relay: PostfixRelay, test_certificate: TestCertificate
) -> None:
    """The guard in this process, its SMTP transport given the certificate as its context:
    ``sent``, and the one message in ada's Maildir is the mail (its Message-ID), received over
    TLS from the logged-in client (Postfix's ``with ESMTPSA``)."""
    transport = SmtpTransport.from_url(
        _login_url(tls_relay), ssl_context=test_certificate.client_context(), sleep=lambda _: 0
    )
    limiter = Limiter.from_url("memory://", Policy.parse("100/1s"))
    guard = memory_guard(
        limiter, MemoryLedger(), transport, config=GuardConfig(sender="Shop <orders@example.org>")
    )
    request = MailRequest(to="ada@example.com", mail_id="lib-1", subject="Hello", body="b\n")
    step = guard.process(request)
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    [raw] = _arrived(tls_relay, "ada")
    message = parsed(raw)
    assert message["Message-ID"] == step.outcome.message_id
    assert message["Subject"] == "Hello" and message["Return-Path"] == "<orders@example.org>"
    assert "with ESMTPSA" in message["Received"], message["Received"]
    assert tls_relay.logged(f"sasl_username={LOGIN}@") == 1


def test_a_worker_delivers_through_starttls_and_auth(tls_stack: RelayStack) -> None:
    """Three mails through a Celery worker: each ``sent`` once into its recipient's Maildir,
    over TLS from the logged-in client; Postfix's queue is empty afterwards."""
    relay = tls_stack.relay
    users = ["bob", "u0", "u1"]
    results = [tls_stack.send(relay.address(user)) for user in users]
    outcomes = tls_stack.settled(results, timeout=30)
    assert [o["status"] for o in outcomes] == ["sent"] * 3, outcomes
    for user, outcome in zip(users, outcomes, strict=True):
        _arrived(relay, user)
        assert message_ids(relay, user) == [outcome["message_id"]]
        assert "with ESMTPSA" in parsed(relay.maildir(user)[0])["Received"]
    poll(lambda: relay.queued() == 0, 10, "Postfix's queue to empty")


def test_an_unknown_user_is_recorded_and_suppressed(tls_stack: RelayStack) -> None:
    """A mail to an address without a mailbox: Postfix refuses it at RCPT with ``550 5.1.1``,
    the mail ends ``failed`` with that reply and the address is suppressed; a second mail to it
    is dropped (``suppressed``) without reaching Postfix; a mail to cy beside them arrives
    once."""
    relay = tls_stack.relay
    gone = relay.address("nobody")
    [failed] = tls_stack.settled([tls_stack.send(gone)], timeout=30)
    assert (failed["status"], failed["reason"]) == ("failed", "smtp_permanent"), failed
    assert failed["smtp_code"] == 550 and "5.1.1" in failed["smtp_reply"], failed
    assert "nobody@" not in failed["smtp_reply"], "the address is masked in the outcome"
    ledger = tls_stack.env["MAILGUARD_LIMITER_URL"]
    entry = suppressions_from_url(ledger, secret="test-secret").suppressed(gone)
    assert entry is not None and "5.1.1" in entry.cause, entry
    again, other = tls_stack.settled([tls_stack.send(gone), tls_stack.send("cy@example.com")], 30)
    assert (again["status"], again["reason"]) == ("dropped", "suppressed"), again
    assert other["status"] == "sent", other
    _arrived(relay, "cy")
    assert message_ids(relay, "cy") == [other["message_id"]]
    assert relay.logged(f"550 5.1.1 <{gone}>") == 1, "the second mail never reached Postfix"
