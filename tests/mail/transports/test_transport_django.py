"""The ``django`` transport with a real Django: Django's SMTP backend (Django's ``EMAIL_*``
settings) pointed at the suite's aiosmtpd, and Anymail's test backend; through the guard, and
through a real worker started with ``DJANGO_SETTINGS_MODULE``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import django
import pytest
from anymail.backends.test import EmailBackend as AnymailTestBackend
from anymail.message import AnymailRecipientStatus
from django.conf import settings
from django.core import mail
from django.test.utils import override_settings

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from mailer import Limiter, ManualClock, Policy
from mailer.factory import build_transport, memory_guard
from mailer.guard import Fail, Finish, GuardConfig, Later, MailRequest
from mailer.mail.transports.django_backend import DjangoTransport
from mailer.records.holds import SENDER
from mailer.records.ledger import MemoryLedger
from mailer.settings import Settings

if not settings.configured:  # workers/django/test_django.py may have configured it here
    settings.configure(  # as tests/workers/django/test_django.py configures it
        EMAIL_BACKEND="workers.django.EmailBackend",
        DEFAULT_FROM_EMAIL="Shop <orders@example.org>",
    )
    django.setup()

SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
ANYMAIL_TEST = "anymail.backends.test.EmailBackend"
ADA = "ada@example.com"
THROTTLE = "454 4.7.0 Throttling failure: Maximum sending rate exceeded."


class RefusingBackend(AnymailTestBackend):  # type: ignore[misc] # Anymail ships no type hints
    """Anymail's test backend whose ESP rejects every recipient: Anymail itself then raises
    ``AnymailRecipientsRefused``."""

    def post_to_esp(self, payload: Any, message: Any) -> Any:
        rejected = AnymailRecipientStatus(message_id=None, status="rejected")
        return {"recipient_status": dict.fromkeys(payload.recipient_emails, rejected)}


@pytest.fixture
def django_smtp(smtp_server: SmtpTestServer) -> Iterator[SmtpTestServer]:
    """Django's EMAIL_HOST and EMAIL_PORT set to the suite's SMTP server for the test."""
    with override_settings(EMAIL_HOST="127.0.0.1", EMAIL_PORT=smtp_server.port, EMAIL_TIMEOUT=10):
        yield smtp_server


def guard_on(backend: str, clock: ManualClock, **config: Any) -> Any:
    transport = DjangoTransport(backend, sleep=lambda _: None)
    limiter = Limiter.from_url("memory://", Policy.parse("100/1s"), clock=clock)
    config.setdefault("sender", "Shop <orders@example.org>")
    return memory_guard(
        limiter, MemoryLedger(clock), transport, config=GuardConfig(**config), clock=clock
    )


def request(mail_id: str, **fields: Any) -> MailRequest:
    fields.setdefault("to", ADA)
    return MailRequest(mail_id=mail_id, subject="Your order", body="Shipped.", **fields)


def test_djangos_smtp_backend_sends_the_built_message_with_djangos_settings(
    django_smtp: SmtpTestServer, clock: ManualClock
) -> None:
    """The exact built message arrives (the derived Message-ID, the attachment, the HTML part),
    the Bcc address in the envelope only, MAIL FROM the sender."""
    guard = guard_on(SMTP_BACKEND, clock)
    attachment = ["invoice.csv", "aWQsdG90YWwKMSw0Mgo=", "text/csv"]
    step = guard.process(
        request("dj-1", html="<p>Shipped.</p>", bcc="audit@example.org", attachments=[attachment])
    )
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    assert (step.outcome.smtp_code, step.outcome.provider) == (250, None)  # smtplib saw 250
    [got] = django_smtp.delivered
    assert got.mail_from == "orders@example.org"
    assert sorted(got.rcpt_tos) == ["ada@example.com", "audit@example.org"]
    message = got.message
    assert message["Message-ID"] == "<dj-1@example.org>" and message["Bcc"] is None
    assert [p.get_filename() for p in message.iter_attachments()] == ["invoice.csv"]
    html = message.get_body(preferencelist=("html",))
    assert html is not None and "<p>Shipped.</p>" in html.get_content()


def test_djangos_smtp_backend_replies_keep_their_reactions(
    django_smtp: SmtpTestServer, clock: ManualClock
) -> None:
    """Through Django's SMTP backend, a throttling reply holds the sender and a 550 5.1.1
    suppresses the recipient, as with mailguard's own SMTP transport."""
    guard = guard_on(SMTP_BACKEND, clock, throttle_hold=5.0)
    django_smtp.fail_data(THROTTLE)
    held = guard.process(request("dj-2"))
    assert isinstance(held, Later) and held.outcome.hold == SENDER, held
    assert held.outcome.smtp_code == 454
    clock.advance(10)  # the hold is over
    django_smtp.fail_rcpt("550 5.1.1 user unknown")
    gone = guard.process(request("dj-3", to="bob@example.com"))
    assert isinstance(gone, Fail) and gone.outcome.reason == "smtp_permanent", gone
    assert guard.suppressions.suppressed("bob@example.com") is not None
    assert django_smtp.delivered == []


def test_anymails_test_backend_gets_every_field(clock: ManualClock) -> None:
    """An HTTP-API backend reads the Django message's fields: from, to, cc, bcc, reply-to,
    subject, text, HTML, attachment and the derived Message-ID as an extra header."""
    mail.outbox = []
    guard = guard_on(ANYMAIL_TEST, clock)
    step = guard.process(
        request(
            "dj-4",
            cc="cy@example.com",
            bcc="audit@example.org",
            reply_to="help@example.org",
            html="<p>Shipped.</p>",
            attachments=[["a.txt", "aGVsbG8=", "text/plain"]],
        )
    )
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    assert step.outcome.smtp_reply == f"accepted by {ANYMAIL_TEST}: 0"  # Anymail's message id
    assert (step.outcome.smtp_code, step.outcome.provider) == (None, "test")
    assert step.outcome.provider_message_id == "0"
    [sent] = mail.outbox
    params = sent.anymail_test_params
    assert str(params["from"]) == "Shop <orders@example.org>"
    assert [e.addr_spec for e in params["to"]] == [ADA]
    assert [e.addr_spec for e in params["cc"]] == ["cy@example.com"]
    assert [e.addr_spec for e in params["bcc"]] == ["audit@example.org"]
    assert [e.addr_spec for e in params["reply_to"]] == ["help@example.org"]
    assert params["subject"] == "Your order"
    assert params["text_body"].strip() == "Shipped." and "<p>Shipped.</p>" in params["html_body"]
    assert [a.name for a in params["attachments"]] == ["a.txt"]
    assert params["extra_headers"]["Message-ID"] == "<dj-4@example.org>"


def test_refused_recipients_fail_and_suppress(clock: ManualClock) -> None:
    """``AnymailRecipientsRefused`` (the ESP rejected every recipient): ``failed``, Anymail's
    message in the outcome, the recipient suppressed; the next mail to it is dropped."""
    guard = guard_on(f"{__name__}.RefusingBackend", clock)
    step = guard.process(request("dj-5"))
    assert isinstance(step, Fail), step
    assert step.outcome.reason == "smtp_permanent"
    assert step.outcome.smtp_reply is not None
    assert "AnymailRecipientsRefused" in step.outcome.smtp_reply
    assert ADA not in step.outcome.smtp_reply  # masked
    assert guard.suppressions.suppressed(ADA) is not None
    again = guard.process(request("dj-6"))
    assert isinstance(again, Finish) and again.outcome.reason == "suppressed"


def test_bad_django_backends_are_refused_in_one_line() -> None:
    """A path that does not import, and mailguard's own queueing backend, are refused when the
    transport is built (a worker's start)."""
    bad = Settings.from_env(
        {"MAILGUARD_TRANSPORT": "django", "MAILGUARD_DJANGO_BACKEND": "nope.EmailBackend"}
    )
    with pytest.raises(ValueError, match=r"^MAILGUARD_DJANGO_BACKEND: cannot import the Django "):
        build_transport(bad)
    loop = Settings(transport="django", django_backend="workers.django.EmailBackend")
    with pytest.raises(ValueError, match=r"^MAILGUARD_DJANGO_BACKEND: workers.django.EmailBack"):
        build_transport(loop)
    default = build_transport(Settings(transport="django"))
    assert isinstance(default, DjangoTransport) and default.backend == SMTP_BACKEND


def test_a_worker_sends_through_djangos_smtp_backend(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """A real worker with ``MAILGUARD_TRANSPORT=django`` and a Django project's settings
    (``EMAIL_HOST``/``EMAIL_PORT``): the mail reaches the SMTP server that Django names, not
    ``MAILGUARD_SMTP_URL``."""
    env = worker_env(
        redis_url,
        "smtp://127.0.0.1:9",  # nothing listens: only Django's settings may be used
        MAILGUARD_POLICY="100/1s",
        MAILGUARD_TRANSPORT="django",
        DJANGO_SETTINGS_MODULE="tests.mail.transports.transport_django_settings",
        TEST_EMAIL_PORT=str(smtp_server.port),
    )
    app = client_app(env)
    worker = CeleryWorker(env).start()
    try:
        result = app.send_task(
            "mailguard.send_mail", args=[ADA], kwargs={"subject": "Via Django", "body": "b"}
        )
        outcome = result.get(timeout=30)
    finally:
        worker.stop()
        app.close()
    assert outcome["status"] == "sent", outcome
    [got] = smtp_server.delivered
    assert got.message["Subject"] == "Via Django" and got.rcpt_tos == (ADA,)
