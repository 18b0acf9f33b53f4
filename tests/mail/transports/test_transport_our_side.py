"""smtp_send_error: a fault of our own side (certificate, TLS handshake, missing STARTTLS or
AUTH, authentication refused) carries the reaction HOLD_TRANSPORT; a connection lost does not."""

from __future__ import annotations

import smtplib
import ssl
from typing import Literal

import pytest

from devservers.smtp_server import SmtpTestServer, TestCertificate
from mailer import Kinds, Limiter, ManualClock, Policy
from mailer.errors import SendError
from mailer.factory import memory_guard
from mailer.guard import GuardConfig, Later, MailRequest
from mailer.mail.replies import Action, reaction_of
from mailer.mail.transports import provider
from mailer.mail.transports.smtp import SmtpTransport
from mailer.mail.transports.smtp_errors import smtp_send_error
from mailer.records.ledger import MemoryLedger


@pytest.mark.parametrize(
    "exc",
    [
        ssl.SSLCertVerificationError(1, "certificate verify failed: self-signed certificate"),
        ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"),
        smtplib.SMTPNotSupportedError("STARTTLS extension not supported by server."),
        smtplib.SMTPNotSupportedError("SMTP AUTH extension not supported by server."),
        smtplib.SMTPAuthenticationError(535, b"5.7.8 Error: authentication failed: bad"),
        smtplib.SMTPSenderRefused(553, b"5.7.1 <a@example.org>: Sender address rejected", "a"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_our_side_refused_holds_the_transport(exc: BaseException) -> None:
    """Each refusal of our own configuration asks for HOLD_TRANSPORT, whatever its class."""
    error = smtp_send_error(exc, ["ada@example.org"], "connect")
    assert reaction_of(error).action is Action.HOLD_TRANSPORT
    assert "ada@example.org" not in str(error)


@pytest.mark.parametrize(
    "exc",
    [
        ssl.SSLEOFError(8, "EOF occurred in violation of protocol"),
        smtplib.SMTPServerDisconnected("Connection unexpectedly closed"),
        ConnectionRefusedError(111, "Connection refused"),
        smtplib.SMTPNotSupportedError("SMTPUTF8 not supported by server"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_lost_connection_or_another_feature_does_not(exc: BaseException) -> None:
    """A connection lost during the handshake is a network condition (RETRY), and a missing
    SMTPUTF8 is this mail's (no transport hold)."""
    error = smtp_send_error(exc, [], "connect")
    assert reaction_of(error).action is not Action.HOLD_TRANSPORT


@pytest.mark.parametrize(("tls", "scheme"), [("implicit", "smtps"), ("starttls", "smtp+starttls")])
def test_an_untrusted_certificate_holds_the_transport_not_the_mail(
    tls: Literal["implicit", "starttls"], scheme: str, test_certificate: TestCertificate
) -> None:
    """Given a real relay whose certificate the system does not trust, the guard's mail is
    deferred / held with hold transport, not failed, and nothing is delivered."""
    clock = ManualClock(1_000_000.0)
    with SmtpTestServer(tls=tls, cert=test_certificate) as server:
        transport = SmtpTransport.from_url(
            f"{scheme}://127.0.0.1:{server.port}", sleep=lambda _: None
        )
        guard = memory_guard(
            Limiter.from_url("memory://", Policy.parse("100/1s"), clock=clock),
            MemoryLedger(clock),
            transport,
            kinds=Kinds.defaults(),
            clock=clock,
            config=GuardConfig(throttle_hold=5.0),
        )
        step = guard.process(MailRequest(to="ada@example.org", mail_id="t1", subject="s", body="b"))
        assert isinstance(step, Later), step.outcome
        assert (step.outcome.status, step.outcome.hold) == ("deferred", "transport")
        assert "CERTIFICATE_VERIFY_FAILED" in (step.outcome.smtp_reply or "")
        assert server.delivered == []


@pytest.mark.parametrize(
    ("error", "action"),
    [
        (provider.http_error(401, "Postmark (HTTP 401): bad token"), Action.HOLD_TRANSPORT),
        (provider.http_error(403, "Mailgun (HTTP 403): forbidden"), Action.HOLD_TRANSPORT),
        (provider.http_error(422, "Postmark (HTTP 422): invalid From"), Action.FAIL),
        (provider.ses_error("InvalidClientTokenId", "The security token included in the "
                            "request is invalid.", status=403, recipients=[], paused_hold=60),
         Action.HOLD_TRANSPORT),
        (provider.ses_error("SignatureDoesNotMatch", "The request signature we calculated does "
                            "not match", status=403, recipients=[], paused_hold=60),
         Action.HOLD_TRANSPORT),
        (provider.ses_error("MessageRejected", "Email address is not verified.", status=400,
                            recipients=[], paused_hold=60), Action.FAIL),
    ],
)  # fmt: skip
def test_a_provider_refusing_our_credentials_holds_the_transport(
    error: SendError, action: Action
) -> None:
    """An API's 401 / 403, and SES's credential errors, hold the transport; an invalid request
    fails the mail."""
    assert reaction_of(error).action is action
