"""The ``anymail`` transport (any ESP Anymail ships, no Django project) against a stand-in for
Postmark's API on 127.0.0.1 (:mod:`tests.mail.transports.postmark_server`: a provider's HTTP
API is the one edge no real part reaches from here), through the guard and through a real
worker that configures Django itself from ``ANYMAIL_*`` variables."""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from mailer import Limiter, ManualClock, Policy
from mailer.factory import build_holds, build_suppressions, build_transport, memory_guard
from mailer.guard import Fail, Finish, GuardConfig, Later, MailRequest
from mailer.mail.transports.anymail import AnymailTransport, shipped_esps
from mailer.records.holds import SENDER
from mailer.records.ledger import MemoryLedger
from mailer.settings import Settings
from tests.mail.transports import postmark_server as postmark
from tests.mail.transports.postmark_server import PostmarkStub
from tests.waiting import poll

TOKEN = "server-token-for-tests"
ADA = "ada@example.com"


@pytest.fixture
def stub() -> Iterator[PostmarkStub]:
    with PostmarkStub(TOKEN) as server:
        yield server


def postmark_env(stub: PostmarkStub, token: str = TOKEN) -> dict[str, str]:
    """The three variables a team on Postmark sets, the API pointed at the stub."""
    return {"ANYMAIL_POSTMARK_SERVER_TOKEN": token, "ANYMAIL_POSTMARK_API_URL": stub.url}


def guard_on(stub: PostmarkStub, clock: ManualClock, token: str = TOKEN, **config: Any) -> Any:
    transport = AnymailTransport(
        "postmark", environ=postmark_env(stub, token), sleep=lambda _: None
    )
    limiter = Limiter.from_url("memory://", Policy.parse("100/1s"), clock=clock)
    config.setdefault("sender", "Shop <orders@example.org>")
    return memory_guard(
        limiter, MemoryLedger(clock), transport, config=GuardConfig(**config), clock=clock
    )


def request(mail_id: str, **fields: Any) -> MailRequest:
    fields.setdefault("to", ADA)
    return MailRequest(mail_id=mail_id, subject="Your order", body="Shipped.", **fields)


def test_a_mail_goes_to_postmark_with_its_fields_and_records_postmarks_id(
    stub: PostmarkStub, clock: ManualClock
) -> None:
    """Postmark gets the token, from, to, subject, both bodies and the derived Message-ID; the
    outcome names the provider and Postmark's MessageID, with no SMTP code."""
    guard = guard_on(stub, clock)
    step = guard.process(request("pm-1", html="<p>Shipped.</p>"))
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    [body] = stub.received
    assert body["From"] == "Shop <orders@example.org>" and body["To"] == ADA
    assert body["Subject"] == "Your order" and body["TextBody"].strip() == "Shipped."
    assert "<p>Shipped.</p>" in body["HtmlBody"]
    assert {"Name": "Message-ID", "Value": "<pm-1@example.org>"} in body["Headers"]
    outcome = step.outcome
    assert outcome.smtp_code is None and outcome.provider == "postmark"
    assert outcome.provider_message_id == stub.sent[0]
    assert outcome.smtp_reply is not None and stub.sent[0] in outcome.smtp_reply


def test_a_delayed_acceptance_is_recorded_as_queued(stub: PostmarkStub, clock: ManualClock) -> None:
    """Postmark accepts but says delivery may be delayed: ``sent``, Postmark's id recorded, the
    reply says ``queued`` (Anymail's reading of Postmark's answer)."""
    stub.answers[ADA] = postmark.delayed(ADA, "pm-late-id")
    step = guard_on(stub, clock).process(request("pm-late"))
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    assert step.outcome.provider_message_id == "pm-late-id"
    assert step.outcome.smtp_reply is not None and step.outcome.smtp_reply.endswith("(queued)")


def test_an_inactive_recipient_fails_and_is_suppressed(
    stub: PostmarkStub, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Postmark's 422 / ``ErrorCode`` 406: ``failed``, the recipient suppressed (the next mail
    to it is dropped without a request), the address masked in the reply; the log line names
    Postmark's error, not an SMTP code."""
    stub.answers[ADA] = postmark.inactive(ADA)
    guard = guard_on(stub, clock)
    with caplog.at_level(logging.WARNING, logger="mailguard"):
        step = guard.process(request("pm-2"))
    assert isinstance(step, Fail) and step.outcome.reason == "smtp_permanent", step
    outcome = step.outcome
    assert outcome.smtp_code is None and outcome.provider == "postmark"
    assert outcome.smtp_reply is not None and '"ErrorCode":406' in outcome.smtp_reply
    assert ADA not in outcome.smtp_reply and "[recipient]" in outcome.smtp_reply
    assert guard.suppressions.suppressed(ADA) is not None
    again = guard.process(request("pm-3"))
    assert isinstance(again, Finish) and again.outcome.reason == "suppressed"
    assert len(stub.received) == 1
    [failed] = [r.getMessage() for r in caplog.records if "pm-2 failed" in r.getMessage()]
    assert "permanent provider error (Postmark AnymailRecipientsRefused" in failed
    assert "SMTP" not in failed and ADA not in caplog.text


def test_an_invalid_request_fails_the_mail_and_suppresses_nobody(
    stub: PostmarkStub, clock: ManualClock
) -> None:
    """Postmark's 422 / ``ErrorCode`` 300 (an invalid request): one request, ``failed`` with
    Postmark's message, nobody suppressed."""
    stub.answers[ADA] = postmark.invalid_request()
    guard = guard_on(stub, clock)
    step = guard.process(request("pm-4"))
    assert isinstance(step, Fail) and step.outcome.reason == "smtp_permanent", step
    assert step.outcome.smtp_reply is not None
    assert "Postmark AnymailRequestsAPIError (HTTP 422)" in step.outcome.smtp_reply
    assert "Invalid 'From' address" in step.outcome.smtp_reply
    assert guard.suppressions.suppressed(ADA) is None and len(stub.received) == 1


def test_refused_credentials_fail_and_log_an_error_naming_postmark(
    stub: PostmarkStub, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrong server token (HTTP 401): the transport is held and the mail waits (deferred /
    held, hold transport), not failed; an error logged naming Postmark and the settings to
    fix; the token is never logged. With holds off the mail fails."""
    guard = guard_on(stub, clock, token="wrong-token")
    step = guard.process(request("pm-5"))
    assert isinstance(step, Later) and step.outcome.hold == "transport", step
    assert step.outcome.smtp_reply is not None and "HTTP 401" in step.outcome.smtp_reply
    unheld = guard_on(stub, clock, token="wrong-token", throttle_hold=None)
    assert isinstance(unheld.process(request("pm-5b")), Fail)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("Postmark refuses the credentials" in e and "ANYMAIL_POSTMARK_" in e for e in errors)
    assert "wrong-token" not in caplog.text


def test_a_rate_limit_holds_the_sender(stub: PostmarkStub, clock: ManualClock) -> None:
    """HTTP 429: one request, not retried at once; the sender is held and the mail booked
    after the hold."""
    stub.answers[ADA] = postmark.RATE_LIMITED
    guard = guard_on(stub, clock, throttle_hold=5.0)
    step = guard.process(request("pm-6"))
    assert len(stub.received) == 1
    assert isinstance(step, Later) and step.outcome.reason == "held", step
    assert step.outcome.hold == SENDER and step.outcome.provider == "postmark"
    assert step.outcome.smtp_code is None and "HTTP 429" in str(step.outcome.smtp_reply)
    hold, _ = guard.holds.active(ADA)
    assert hold is not None and hold.until == pytest.approx(clock.now + 5.0)
    assert step.outcome.due is not None and step.outcome.due >= hold.until


def test_a_server_error_is_retried_then_deferred(stub: PostmarkStub, clock: ManualClock) -> None:
    """HTTP 500: tried 3 times in the send, then ``deferred`` / ``smtp_transient`` with
    Postmark's answer; the next run sends once Postmark answers again."""
    stub.answers[ADA] = postmark.SERVER_ERROR
    guard = guard_on(stub, clock)
    first = guard.process(request("pm-7"))
    assert len(stub.received) == 3
    assert isinstance(first, Later) and first.outcome.reason == "smtp_transient", first
    assert first.outcome.provider == "postmark" and first.outcome.smtp_code is None
    assert first.outcome.smtp_reply is not None and "HTTP 500" in first.outcome.smtp_reply
    del stub.answers[ADA]
    clock.advance(first.wait)
    last = guard.process(request("pm-7"), first.progress)
    assert isinstance(last, Finish) and last.outcome.status == "sent", last
    assert last.outcome.provider_message_id == stub.sent[0]


def test_no_answer_is_retried_then_deferred(clock: ManualClock) -> None:
    """Nothing listens at the API's address: tried 3 times in the send, then ``deferred`` /
    ``smtp_transient``, the reply naming Postmark and the connection error."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    environ = {"ANYMAIL_POSTMARK_SERVER_TOKEN": TOKEN}
    environ["ANYMAIL_POSTMARK_API_URL"] = f"http://127.0.0.1:{port}/"
    transport = AnymailTransport("postmark", environ=environ, sleep=lambda _: None)
    limiter = Limiter.from_url("memory://", Policy.parse("100/1s"), clock=clock)
    config = GuardConfig(sender="orders@example.org")
    guard = memory_guard(limiter, MemoryLedger(clock), transport, config=config, clock=clock)
    step = guard.process(request("pm-8"))
    assert isinstance(step, Later) and step.outcome.reason == "smtp_transient", step
    assert step.outcome.attempts == 3 and step.outcome.provider == "postmark"
    reply = str(step.outcome.smtp_reply)
    assert reply.startswith("Postmark AnymailRequestsAPIError: ") and "ConnectionError" in reply


def test_settings_that_cannot_work_are_refused_in_one_line(
    stub: PostmarkStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ESP, an ESP Anymail does not ship (the shipped ones listed), the debug switch that
    prints keys, and Anymail not installed: each a ``ValueError`` naming what to set or
    install. (A missing token: ``test_transport_refusals.py``, in a fresh worker.)"""
    with pytest.raises(ValueError, match=r"^MAILGUARD_ANYMAIL_ESP must be set"):
        Settings.from_env({"MAILGUARD_TRANSPORT": "anymail"})
    unknown = Settings.from_env({"MAILGUARD_TRANSPORT": "anymail", "MAILGUARD_ANYMAIL_ESP": "x"})
    with pytest.raises(ValueError, match=r"must be one of .*mailgun.*postmark.*; got 'x'$"):
        build_transport(unknown)
    assert "postmark" in shipped_esps() and "test" not in shipped_esps()
    for debug in ("true", "1"):
        with pytest.raises(ValueError, match=r"^ANYMAIL_DEBUG_API_REQUESTS prints"):
            AnymailTransport(
                "postmark", environ=postmark_env(stub) | {"ANYMAIL_DEBUG_API_REQUESTS": debug}
            )
    monkeypatch.setitem(sys.modules, "anymail", None)  # as if it were not installed
    with pytest.raises(ValueError, match=r"celery-mailguard\[anymail\]"):
        AnymailTransport("postmark", environ=postmark_env(stub))


def test_a_worker_without_a_django_project_sends_through_postmark(
    redis_url: str, stub: PostmarkStub
) -> None:
    """A real worker with the three variables (and the API at the stub), no Django project:
    a mail is sent (Postmark's id recorded, no SMTP code); an inactive recipient fails and is
    on the shared suppression list; an invalid request fails; a 500 waits to be retried; a
    429 holds the sender in the shared holds."""
    inactive, invalid, broken, limited = (
        f"{n}@example.com" for n in ("gone", "bad", "err", "fast")
    )
    stub.answers |= {
        inactive: postmark.inactive(inactive),
        invalid: postmark.invalid_request(),
        broken: postmark.SERVER_ERROR,
        limited: postmark.RATE_LIMITED,
    }
    env = worker_env(
        redis_url,
        "smtp://127.0.0.1:9",  # nothing listens: only Postmark may be used
        MAILGUARD_POLICY="100/1s",
        MAILGUARD_TRANSPORT="anymail",
        MAILGUARD_ANYMAIL_ESP="postmark",
        MAILGUARD_THROTTLE_HOLD="10m",
        MAILGUARD_RETRY_BACKOFF="10m",
        **postmark_env(stub),
    )
    env.pop("DJANGO_SETTINGS_MODULE", None)
    app = client_app(env)
    worker = CeleryWorker(env).start()

    def send(to: str) -> Any:
        return app.send_task("mailguard.send_mail", args=[to], kwargs={"subject": "S", "body": "b"})

    try:
        sent = send(ADA).get(timeout=30)
        gone = send(inactive).get(timeout=30, propagate=False)
        bad = send(invalid).get(timeout=30, propagate=False)
        waiting = send(broken)
        poll(lambda: waiting.state == "DEFERRED", 30, "the mail after a 500 deferred")
        held = send(limited)
        poll(lambda: held.state == "DEFERRED", 30, "the mail after a 429 held")
        log = worker.log()
    finally:
        worker.stop()
        app.close()
    assert sent["status"] == "sent" and sent["smtp_code"] is None, sent
    assert sent["provider"] == "postmark" and sent["provider_message_id"] == stub.sent[0]
    settings = Settings.from_env(env)
    assert gone.args[0]["status"] == "failed" and gone.args[0]["smtp_code"] is None
    assert build_suppressions(settings).suppressed(inactive) is not None
    assert bad.args[0]["status"] == "failed" and "ErrorCode" in bad.args[0]["smtp_reply"]
    assert build_suppressions(settings).suppressed(invalid) is None
    assert waiting.info["reason"] == "smtp_transient" and len(stub.requests_to(broken)) == 2
    assert held.info["reason"] == "held" and held.info["hold"] == SENDER
    sender_hold, _ = build_holds(settings).active()
    assert sender_hold is not None
    assert "permanent provider error (Postmark" in log and "SMTP error None" not in log
    assert TOKEN not in log and inactive not in log
