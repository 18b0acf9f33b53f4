"""A message carried whole (``send_mail(..., mime=...)``, what Django's backend sends): checked
at enqueue and in the worker, sent as its bytes to its envelope through the guard, mailguard's
SMTP transport and Django's own SMTP backend (``MAILGUARD_TRANSPORT=django``), with the suite's
aiosmtpd server; a suppressed recipient leaves the envelope, not the headers."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import django
import pytest
from django.conf import settings
from django.test.utils import override_settings

from devservers.smtp_server import SmtpTestServer
from mailer import Limiter, ManualClock, Policy
from mailer.errors import InvalidMessage
from mailer.factory import memory_guard
from mailer.guard import Finish, GuardConfig, MailRequest
from mailer.mail.arguments import InvalidArguments, check_arguments
from mailer.mail.carried import carried_bytes
from mailer.mail.transports.base import Transport
from mailer.mail.transports.django_backend import DjangoTransport
from mailer.mail.transports.smtp import SmtpTransport
from mailer.records.ledger import MemoryLedger
from tests.mail.transports.test_transport_ses import REGION, moto_url, sent_raw

__all__ = ["moto_url"]  # the SES fixture, used here as in test_transport_ses.py

if not settings.configured:  # as workers/django/test_django.py configures it: whichever first
    settings.configure(
        EMAIL_BACKEND="workers.django.EmailBackend",
        DEFAULT_FROM_EMAIL="Shop <orders@example.org>",
    )
    django.setup()

from django.core.mail import EmailMessage

from workers.django import task_kwargs

pytestmark = pytest.mark.usefixtures("aws_env")  # tests/mail/conftest.py

SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
SUBSCRIBERS = ["ada@example.com", "bob@example.com"]


def _list_message() -> EmailMessage:
    """A mailing list's message: To shows the list, the envelope is its subscribers and an
    auditor in bcc; MAIL FROM is the bounce address while From shows the list."""
    return EmailMessage(
        "Digest",
        "From the editor:\n.a line with a dot\n",
        "bounces@example.org",
        SUBSCRIBERS,
        bcc=["audit@example.org"],
        headers={"To": "News <news@example.org>", "From": "News <news@example.org>"},
    )


def _request(message: EmailMessage, mail_id: str) -> tuple[MailRequest, bytes]:
    kwargs = task_kwargs(message)
    return MailRequest(mail_id=mail_id, **kwargs), base64.b64decode(kwargs["mime"])


def _guard(transport: Transport, clock: ManualClock) -> Any:
    limiter = Limiter.from_url("memory://", Policy.parse("100/1s"), clock=clock)
    config = GuardConfig(sender="Shop <orders@example.org>")
    return memory_guard(limiter, MemoryLedger(clock), transport, config=config, clock=clock)


@pytest.fixture
def smtp_transport(smtp_server: SmtpTestServer) -> Transport:
    return SmtpTransport.from_url(smtp_server.url, sleep=lambda _: None)


@pytest.fixture
def django_transport(smtp_server: SmtpTestServer) -> Iterator[Transport]:
    """Django's SMTP backend in the worker, pointed at the suite's SMTP server."""
    with override_settings(EMAIL_HOST="127.0.0.1", EMAIL_PORT=smtp_server.port, EMAIL_TIMEOUT=10):
        yield DjangoTransport(SMTP_BACKEND, sleep=lambda _: None)


@pytest.mark.parametrize("transport_name", ["smtp_transport", "django_transport"])
def test_a_carried_message_goes_as_its_bytes_to_its_envelope(
    request: pytest.FixtureRequest,
    transport_name: str,
    smtp_server: SmtpTestServer,
    clock: ManualClock,
) -> None:
    """The bytes Django built arrive unchanged (``From `` and dot lines as written), to the
    envelope (the subscribers and the bcc, not the list's address in To), from ``from_email``;
    the outcome's Message-ID is the message's own."""
    guard = _guard(request.getfixturevalue(transport_name), clock)
    mail_request, wire = _request(_list_message(), "list-1")
    step = guard.process(mail_request)
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    [got] = smtp_server.delivered
    assert got.mail_from == "bounces@example.org"
    assert sorted(got.rcpt_tos) == ["ada@example.com", "audit@example.org", "bob@example.com"]
    assert got.content.rstrip(b"\r\n") == wire.rstrip(b"\r\n")
    assert b"\r\nFrom the editor:\r\n.a line with a dot\r\n" in got.content
    assert step.outcome.message_id == got.message["Message-ID"]


def test_a_suppressed_recipient_leaves_the_envelope_not_the_headers(
    smtp_transport: Transport, smtp_server: SmtpTestServer, clock: ManualClock
) -> None:
    """bob is suppressed: ada and the auditor get the message, whose headers are Django's."""
    guard = _guard(smtp_transport, clock)
    guard.suppressions.suppress("bob@example.com", cause="550 5.1.1 user unknown")
    message = _list_message()
    message.extra_headers.pop("To")
    mail_request, wire = _request(message, "list-2")
    step = guard.process(mail_request)
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    [got] = smtp_server.delivered
    assert sorted(got.rcpt_tos) == ["ada@example.com", "audit@example.org"]
    assert got.message["To"] == "ada@example.com, bob@example.com"
    assert got.content.rstrip(b"\r\n") == wire.rstrip(b"\r\n")


def test_a_built_mail_keeps_a_body_line_starting_with_from(
    smtp_transport: Transport, smtp_server: SmtpTestServer, clock: ManualClock
) -> None:
    """mailguard's own messages too: ``From `` at a line's start is sent as written (no
    ``>From``), as Django's SMTP backend sends it."""
    guard = _guard(smtp_transport, clock)
    step = guard.process(
        MailRequest(to="ada@example.com", mail_id="m-1", subject="s", body="From me\nto you")
    )
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    [got] = smtp_server.delivered
    assert b"\r\n\r\nFrom me\r\nto you" in got.content and b">From" not in got.content


def _mime(text: bytes) -> str:
    return base64.b64encode(text).decode("ascii")


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (b"not base64 at all!", "not valid base64"),
        (_mime(b"Subject: s\r\n\r\nbody"), "no From header"),
        (_mime(b"From: a@example.com\r\nBcc: eve@example.com\r\n\r\nb"), "a Bcc header"),
        (_mime(b"From: a@example.com\r\nResent-To: eve@example.com\r\n\r\nb"), "Resent-To"),
        (_mime(b"From: a@example.com\r\nnot a header line\r\n\r\nb"), "malformed"),
        (_mime(b" folded first\r\nFrom: a@example.com\r\n\r\nb"), "malformed"),
        (_mime(b""), "malformed"),
    ],
)
def test_a_carried_message_is_checked(value: Any, error: str) -> None:
    """Bad base64, no From, a Bcc or Resent-* header (recipients no one would count), a
    malformed header block: one line saying which, in the worker and at enqueue."""
    if isinstance(value, bytes):
        value = value.decode("ascii")
    with pytest.raises(InvalidMessage, match=error):
        carried_bytes(value)
    with pytest.raises(InvalidArguments, match=error):
        check_arguments([], {"to": "ada@example.com", "mime": value})


def test_a_carried_message_comes_alone() -> None:
    """What a carried message holds cannot also come as an argument: one line names each."""
    kwargs = task_kwargs(EmailMessage("s", "b", to=["ada@example.com"]))
    assert check_arguments([], kwargs)["mime"] == kwargs["mime"]
    with pytest.raises(InvalidArguments, match="subject, headers cannot come beside it"):
        check_arguments([], {**kwargs, "subject": "s", "headers": {"X-A": "1"}})


def test_the_worker_refuses_text_beside_a_carried_message(clock: ManualClock) -> None:
    """A producer that skipped ``delay``'s check: the worker drops the mail as invalid."""
    from mailer.mail.transports.memory import MemoryTransport  # noqa: PLC0415

    guard = _guard(MemoryTransport(), clock)
    kwargs = task_kwargs(EmailMessage("s", "b", to=["ada@example.com"]))
    step = guard.process(MailRequest(mail_id="m-2", subject="also", **kwargs))
    assert isinstance(step, Finish) and step.outcome.reason == "invalid", step
    assert "carried message takes no subject" in (step.outcome.detail or "")


def test_an_api_backend_reads_the_carried_messages_fields(clock: ManualClock) -> None:
    """Through Anymail's test backend (an ESP's API, in process): the envelope as to, cc and
    bcc (the To and Cc headers say which), From, Subject, the text, HTML and attachment read
    back from Django's message, Django's Message-ID as an extra header."""
    from django.core import mail  # noqa: PLC0415
    from django.core.mail import EmailMultiAlternatives  # noqa: PLC0415

    mail.outbox = []
    guard = _guard(
        DjangoTransport("anymail.backends.test.EmailBackend", sleep=lambda _: None), clock
    )
    message = EmailMultiAlternatives(
        "Invoice",
        "Attached.",
        "Shop <orders@example.org>",
        ["ada@example.com"],
        cc=["cy@example.com"],
        bcc=["audit@example.org"],
    )
    message.attach_alternative("<p>Attached.</p>", "text/html")
    message.attach("invoice.csv", "id,total\n", "text/csv")
    mail_request, _ = _request(message, "api-1")
    step = guard.process(mail_request)
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    [sent] = mail.outbox
    params = sent.anymail_test_params
    assert str(params["from"]) == "Shop <orders@example.org>"
    assert [e.addr_spec for e in params["to"]] == ["ada@example.com"]
    assert [e.addr_spec for e in params["cc"]] == ["cy@example.com"]
    assert [e.addr_spec for e in params["bcc"]] == ["audit@example.org"]
    assert params["subject"] == "Invoice"
    assert params["text_body"] == "Attached." and params["html_body"] == "<p>Attached.</p>"
    assert [a.name for a in params["attachments"]] == ["invoice.csv"]
    assert params["extra_headers"]["Message-ID"] == step.outcome.message_id


def test_ses_takes_the_carried_bytes_and_the_envelope(moto_url: str, clock: ManualClock) -> None:
    """SES (moto's SES v2 on 127.0.0.1) receives the carried bytes as its raw message and the
    envelope as its Destination."""
    from mailer.mail.transports.ses import SesTransport  # noqa: PLC0415

    before = len(sent_raw())
    transport = SesTransport(REGION, endpoint_url=moto_url, sleep=lambda _: None)
    guard = _guard(transport, clock)
    mail_request, wire = _request(_list_message(), "ses-list-1")
    step = guard.process(mail_request)
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    [got] = sent_raw()[before:]
    assert got.raw_data.encode("utf-8") == wire
    # moto records the request's Destination first, then adds the raw message's header
    # addresses of its own accord (SES sends to the Destination given)
    envelope = ["ada@example.com", "bob@example.com", "audit@example.org"]
    assert got.destinations[:3] == envelope
