"""The ``ses`` transport against SES v2 stand-ins on 127.0.0.1, through the guard and a real worker.

moto's server (``ThreadedMotoServer``, started here on 127.0.0.1) is the only SES v2 stand-in
reachable from the test machines: no network beyond loopback. It keeps what it was sent, so the
raw message is read back from its backend. moto cannot be told to throttle, so the throttling,
paused-account and unknown answers come from :class:`SesErrorStub`, a tiny HTTP server that
speaks SES v2's error shape (status, ``x-amzn-ErrorType`` header, JSON body) and nothing else.
"""

from __future__ import annotations

import email
import json
import logging
import threading
from collections.abc import Iterator
from email.message import EmailMessage
from email.policy import default
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.server import ThreadedMotoServer
from moto.ses.models import ses_backends

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from mailer import Limiter, ManualClock, Policy
from mailer.factory import build_transport, memory_guard
from mailer.guard import Fail, Finish, GuardConfig, Later, MailRequest
from mailer.mail.transports.ses import SesTransport
from mailer.records.holds import SENDER
from mailer.records.ledger import MemoryLedger
from mailer.settings import Settings
from tests.waiting import poll

REGION = "eu-west-1"
SENDER_ADDRESS = "orders@example.org"
ADA = "ada@example.com"


pytestmark = pytest.mark.usefixtures("aws_env")


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    """moto's SES v2 on 127.0.0.1 (a free port), with ``example.org`` verified."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    client = boto3.client(
        "sesv2",
        region_name=REGION,
        endpoint_url=url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_email_identity(EmailIdentity="example.org")  # verified first, as SES wants
    try:
        yield url
    finally:
        server.stop()


def sent_raw() -> list[Any]:
    """What moto's SES backend was sent in the region (raw messages), oldest first."""
    return list(ses_backends[DEFAULT_ACCOUNT_ID][REGION].sent_messages)


class SesErrorStub:
    """An HTTP server on 127.0.0.1 that answers every request with one SES v2 error."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        answer = json.dumps({"message": message}).encode()
        self.requests = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                stub.requests += 1
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("x-amzn-ErrorType", f"{error_type}:http://internal.amazon.com/")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> SesErrorStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def guard_on(url: str, clock: ManualClock, **config: Any) -> Any:
    transport = SesTransport(REGION, endpoint_url=url, sleep=lambda _: None, paused_hold=600)
    limiter = Limiter.from_url("memory://", Policy.parse("100/1s"), clock=clock)
    config.setdefault("sender", f"Shop <{SENDER_ADDRESS}>")
    return memory_guard(
        limiter, MemoryLedger(clock), transport, config=GuardConfig(**config), clock=clock
    )


def request(mail_id: str, **fields: Any) -> MailRequest:
    return MailRequest(to=ADA, mail_id=mail_id, subject="Your order", body="Shipped.", **fields)


def test_a_mail_goes_to_ses_as_raw_mime_with_its_headers_and_attachment(
    moto_url: str, clock: ManualClock
) -> None:
    """Sent through moto: the raw message arrives with the derived Message-ID, the attachment
    and the HTML part; Bcc reaches SES as a destination, never as a header. The outcome names
    SES and its MessageId, with no SMTP code."""
    before = len(sent_raw())
    guard = guard_on(moto_url, clock)
    attachment = ["invoice.csv", "aWQsdG90YWwKMSw0Mgo=", "text/csv"]
    step = guard.process(
        request("ses-1", html="<p>Shipped.</p>", bcc="audit@example.org", attachments=[attachment])
    )
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    assert step.outcome.smtp_reply is not None and step.outcome.smtp_reply.startswith("SES")
    assert step.outcome.smtp_code is None and step.outcome.provider == "ses"
    assert step.outcome.provider_message_id and step.outcome.provider_message_id in (
        step.outcome.smtp_reply
    )
    got = sent_raw()[before:]
    assert len(got) == 1
    message = email.message_from_string(got[0].raw_data, _class=EmailMessage, policy=default)
    assert message["Message-ID"] == "<ses-1@example.org>"
    assert message["Bcc"] is None and "audit@example.org" in got[0].destinations
    assert [p.get_filename() for p in message.iter_attachments()] == ["invoice.csv"]
    html = message.get_body(preferencelist=("html",))
    assert html is not None and "<p>Shipped.</p>" in html.get_content()


def test_an_unverified_sender_fails_the_mail_and_suppresses_nobody(
    moto_url: str, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """moto answers ``MessageRejected`` for a sender domain not verified: ``failed``, the
    provider's message in the outcome, the recipient not suppressed; the log line names SES's
    error."""
    guard = guard_on(moto_url, clock, sender="shop@unverified.example.net")
    with caplog.at_level(logging.WARNING, logger="mailguard"):
        step = guard.process(request("ses-2"))
    [line] = [r.getMessage() for r in caplog.records if "ses-2 failed" in r.getMessage()]
    assert "permanent provider error (SES MessageRejected" in line, line
    assert isinstance(step, Fail), step
    outcome = step.outcome
    assert outcome.reason == "smtp_permanent" and outcome.smtp_code is None
    assert outcome.smtp_reply is not None and "MessageRejected" in outcome.smtp_reply
    assert guard.suppressions.suppressed(ADA) is None


def test_a_throttling_answer_holds_the_sender(clock: ManualClock) -> None:
    """``TooManyRequestsException`` (HTTP 429, "Maximum sending rate exceeded"): one request,
    not retried at once; the sender is held and the mail booked after the hold."""
    with SesErrorStub(429, "TooManyRequestsException", "Maximum sending rate exceeded.") as stub:
        guard = guard_on(stub.url, clock, throttle_hold=5.0)
        step = guard.process(request("ses-3"))
        assert stub.requests == 1
    assert isinstance(step, Later), step
    assert step.outcome.reason == "held" and step.outcome.hold == SENDER
    hold, _ = guard.holds.active(ADA)
    assert hold is not None and hold.until == pytest.approx(clock.now + 5.0)
    assert step.outcome.due is not None and step.outcome.due >= hold.until


def test_a_paused_account_holds_the_sender_for_the_longest_hold(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """``SendingPausedException``: the sender is held for ``paused_hold`` (the transport's
    MAILGUARD_THROTTLE_HOLD_MAX) and an error is logged."""
    with SesErrorStub(400, "SendingPausedException", "Sending paused for this account.") as stub:
        guard = guard_on(stub.url, clock, throttle_hold=5.0, throttle_hold_max=600.0)
        step = guard.process(request("ses-4", kind="notice"))
    assert isinstance(step, Later), step
    hold, _ = guard.holds.active(ADA)
    assert hold is not None and hold.until == pytest.approx(clock.now + 600.0)
    assert any(r.levelname == "ERROR" and "paused" in r.getMessage() for r in caplog.records)


def test_an_unknown_answer_is_retried_then_expires_with_the_providers_message(
    clock: ManualClock,
) -> None:
    """An error code the mapping does not know: tried 3 times in the send, retried by the guard
    until the kind's lifetime (``code``: its 5 min), then ``dropped`` / ``expired`` with SES's
    message."""
    with SesErrorStub(400, "WeirdNewException", "Something new went wrong.") as stub:
        guard = guard_on(stub.url, clock, throttle_hold=None, retry_backoff=200.0)
        first = guard.process(request("ses-5", kind="code"))
        assert isinstance(first, Later) and first.outcome.reason == "smtp_transient", first
        clock.advance(first.wait)
        last = guard.process(request("ses-5", kind="code"), first.progress)
        assert stub.requests == 6  # 3 tries in each of the two runs
    assert isinstance(last, Finish), last
    assert (last.outcome.status, last.outcome.reason) == ("dropped", "expired")
    assert last.outcome.smtp_reply == "SES WeirdNewException: Something new went wrong."


def test_bad_ses_settings_are_refused_in_one_line() -> None:
    """SES without a region, and an unknown transport, are refused by the settings."""
    with pytest.raises(ValueError, match=r"^MAILGUARD_SES_REGION must be set"):
        Settings.from_env({"MAILGUARD_TRANSPORT": "ses"})
    with pytest.raises(ValueError, match=r"^MAILGUARD_TRANSPORT must be one of smtp, django"):
        Settings.from_env({"MAILGUARD_TRANSPORT": "sendgrid"})
    built = build_transport(
        Settings.from_env({"MAILGUARD_TRANSPORT": "ses", "MAILGUARD_SES_REGION": REGION})
    )
    assert isinstance(built, SesTransport) and built.region == REGION


def test_a_worker_sends_through_ses(redis_url: str, moto_url: str) -> None:
    """A real worker with ``MAILGUARD_TRANSPORT=ses`` pointed at moto: the mail arrives there,
    its outcome ``sent``."""
    before = len(sent_raw())
    env = worker_env(
        redis_url,
        "console://",
        MAILGUARD_POLICY="100/1s",
        MAILGUARD_SENDER=SENDER_ADDRESS,
        MAILGUARD_TRANSPORT="ses",
        MAILGUARD_SES_REGION=REGION,
        MAILGUARD_SES_ENDPOINT_URL=moto_url,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
    )
    app = client_app(env)
    worker = CeleryWorker(env).start()
    try:
        result = app.send_task(
            "mailguard.send_mail", args=[ADA], kwargs={"subject": "Hi", "body": "b"}
        )
        outcome = result.get(timeout=30)
        assert outcome["status"] == "sent", outcome
        poll(lambda: len(sent_raw()) > before, 5, "the mail at moto")
    finally:
        worker.stop()
        app.close()
    assert sent_raw()[-1].raw_data.count("Subject: Hi") == 1
