"""Django's EMAIL_BACKEND = "workers.django.EmailBackend" with a real Django, a real worker, a
real Redis and a real SMTP server: messages arrive whole and are paced by the limiter."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from email.mime.multipart import MIMEMultipart
from typing import Any

import celery
import django
import pytest
from django.conf import settings

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from mailer.mail.arguments import check_arguments
from tests.smtp_server import SmtpTestServer
from tests.waiting import poll

if not settings.configured:
    settings.configure(
        EMAIL_BACKEND="workers.django.EmailBackend",
        DEFAULT_FROM_EMAIL="Shop <orders@example.org>",
    )
    django.setup()

from django.core import mail
from django.core.mail import EmailMultiAlternatives

from workers.django import task_kwargs

SLACK = 0.3  # seconds: admission-to-receipt jitter between two mails


@pytest.fixture
def stack(redis_url: str, smtp_server: SmtpTestServer) -> Iterator[SmtpTestServer]:
    """A worker on the test's Redis and SMTP server; its app made current, as a Django
    project's Celery app would be (send_mail is a shared task)."""
    env = worker_env(redis_url, smtp_server.url, MAILGUARD_POLICY="1/1s, 10/1h")
    previous = celery.current_app._get_current_object()  # put back after the test
    app = client_app(env)
    app.set_current()
    worker = CeleryWorker(env).start()
    try:
        yield smtp_server
    finally:
        worker.stop()
        app.close()
        previous.set_current()


def test_a_full_django_message_arrives_intact(stack: SmtpTestServer) -> None:
    """EmailMultiAlternatives with cc, bcc, reply_to, a header, HTML and two attachments."""
    message = EmailMultiAlternatives(
        subject="Invoice 2041",
        body="Your invoice is attached.",
        to=["ada@example.com"],
        cc=["cy@example.com"],
        bcc=["audit@example.org"],
        reply_to=["help@example.org"],
        headers={"X-Order": "2041"},
    )
    message.attach_alternative("<p>Your invoice is attached.</p>", "text/html")
    message.attach("invoice.csv", "id,total\n2041,99.50\n", "text/csv")
    message.attach("logo.png", b"\x89PNG\r\n\x1a\n\x00binary", "image/png")
    assert message.send() == 1
    poll(lambda: len(stack.delivered) == 1, 30, "the message")
    delivered = stack.delivered[0]
    assert sorted(delivered.rcpt_tos) == ["ada@example.com", "audit@example.org", "cy@example.com"]
    got = delivered.message
    assert got["To"] == "ada@example.com" and got["Cc"] == "cy@example.com"
    assert got["Bcc"] is None, "bcc is in the envelope only"
    assert got["From"] == "Shop <orders@example.org>" and got["Reply-To"] == "help@example.org"
    assert got["X-Order"] == "2041" and got["Subject"] == "Invoice 2041"
    html = got.get_body(("html",))
    assert html is not None and "<p>Your invoice" in html.get_content()
    files: dict[str, Any] = {a.get_filename(): a for a in got.iter_attachments()}
    # A text attachment is text on the wire (its lines end in CRLF there) and keeps its charset.
    assert files["invoice.csv"].get_content().replace("\r\n", "\n") == "id,total\n2041,99.50\n"
    assert files["invoice.csv"].get_content_charset() == "utf-8"
    assert files["logo.png"].get_payload(decode=True) == b"\x89PNG\r\n\x1a\n\x00binary"
    assert files["logo.png"].get_content_type() == "image/png"


def test_a_burst_from_django_is_paced_and_a_message_waits_for_every_recipient(
    stack: SmtpTestServer,
) -> None:
    """Three messages to ada through django.core.mail.send_mail go a second apart (1/1s);
    a message to ada and bob at once waits for ada's slot and goes to both together."""
    for n in range(3):
        assert mail.send_mail(f"n{n}", "body", None, ["ada@example.com"]) == 1
    assert mail.send_mail("both", "body", None, ["ada@example.com", "bob@example.com"]) == 1
    assert mail.get_connection().send_messages([mail.EmailMessage("none", "b")]) == 0
    poll(lambda: len(stack.delivered) == 4, 40, "the four messages")
    to_ada = sorted(d.received_at for d in stack.delivered if "ada@example.com" in d.rcpt_tos)
    assert len(to_ada) == 4
    gaps = [b - a for a, b in itertools.pairwise(to_ada)]
    assert min(gaps) >= 1.0 - SLACK, gaps
    both = next(d for d in stack.delivered if d.message["Subject"] == "both")
    assert sorted(both.rcpt_tos) == ["ada@example.com", "bob@example.com"], "one transaction"


def test_enqueue_errors_raise_unless_fail_silently(stack: SmtpTestServer) -> None:
    """A bad address is refused at enqueue: Django's send raises; fail_silently returns 0."""
    bad = mail.EmailMessage("s", "b", to=["not an address"])
    with pytest.raises(ValueError, match=r"to\[0\]"):
        bad.send()
    silent = mail.EmailMessage("s", "b", to=["not an address"])  # send() keeps its connection
    assert silent.send(fail_silently=True) == 0


def test_from_and_reply_to_headers_become_the_messages_own_fields() -> None:
    """Django lets ``headers={"From": ..., "Reply-To": ...}`` stand in for from_email and
    reply_to: they travel as those arguments (checked like them), other headers as headers; the
    message's own from_email (DEFAULT_FROM_EMAIL here) stays the envelope sender, as Sender."""
    message = mail.EmailMessage(
        "s",
        "b",
        to=["ada@example.com"],
        headers={"From": "Desk <desk@example.org>", "reply-to": "help@example.org", "X-A": "1"},
    )
    kwargs = task_kwargs(message)
    assert kwargs["from_email"] == "Desk <desk@example.org>"
    assert kwargs["reply_to"] == ["help@example.org"]
    assert kwargs["headers"] == {"X-A": "1", "Sender": "Shop <orders@example.org>"}
    check_arguments([], kwargs)


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (lambda m: m.attach_alternative("{}", "application/json"), "one text/html alternative"),
        (lambda m: m.attach(MIMEMultipart("mixed")), "multipart MIMEBase"),
        (lambda m: m.extra_headers.update({"To": "eve@example.com"}), "header 'To' is set by"),
    ],
)
def test_what_cannot_be_carried_raises_unless_fail_silently(
    build: Callable[[EmailMultiAlternatives], object], error: str
) -> None:
    """Another alternative than HTML, a multipart MIMEBase attachment or a reserved header:
    the send raises naming it (nothing is enqueued); with fail_silently it counts 0."""
    for fail_silently in (False, True):
        message = EmailMultiAlternatives("s", "b", to=["ada@example.com"])
        build(message)
        if fail_silently:
            assert message.send(fail_silently=True) == 0
        else:
            with pytest.raises(ValueError, match=error):
                message.send()
