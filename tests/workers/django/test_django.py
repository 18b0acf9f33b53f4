"""Django's EMAIL_BACKEND = "workers.django.EmailBackend" with a real Django, a real worker, a
real Redis and a real SMTP server: messages arrive whole and are paced by the limiter."""

from __future__ import annotations

import base64
import email
import email.policy
import itertools
from collections.abc import Callable
from email.mime.multipart import MIMEMultipart
from typing import Any

import celery
import django
import pytest
import redis
from django.conf import settings

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from mailer import NotEnqueued
from mailer.mail.arguments import check_arguments
from mailer.records.schedule import RedisSchedule
from mailer.settings import Settings
from tests.waiting import poll
from tests.workers.conftest import StackFactory

if not settings.configured:
    settings.configure(
        EMAIL_BACKEND="workers.django.EmailBackend",
        DEFAULT_FROM_EMAIL="Shop <orders@example.org>",
    )
    django.setup()

from django.core import mail
from django.core.mail import BadHeaderError, EmailMultiAlternatives

from tests.workers.django.test_django_corpus import normalised
from workers.django import task_kwargs
from workers.process import settings as process_settings

SLACK = 0.3  # seconds: admission-to-receipt jitter between two mails


@pytest.fixture
def django_stack(stack: StackFactory) -> SmtpTestServer:
    """A worker on the test's Redis and SMTP server; its app made current, as a Django
    project's Celery app would be (send_mail is a shared task)."""
    return stack(MAILGUARD_POLICY="1/1s, 10/1h", current=True).smtp


def test_a_full_django_message_arrives_intact(django_stack: SmtpTestServer) -> None:
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
    poll(lambda: len(django_stack.delivered) == 1, 30, "the message")
    delivered = django_stack.delivered[0]
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
    django_stack: SmtpTestServer,
) -> None:
    """Three messages to ada through django.core.mail.send_mail go a second apart (1/1s);
    a message to ada and bob at once waits for ada's slot and goes to both together."""
    for n in range(3):
        assert mail.send_mail(f"n{n}", "body", None, ["ada@example.com"]) == 1
    assert mail.send_mail("both", "body", None, ["ada@example.com", "bob@example.com"]) == 1
    assert mail.get_connection().send_messages([mail.EmailMessage("none", "b")]) == 0
    poll(lambda: len(django_stack.delivered) == 4, 40, "the four messages")
    to_ada = sorted(
        d.received_at for d in django_stack.delivered if "ada@example.com" in d.rcpt_tos
    )
    assert len(to_ada) == 4
    gaps = [b - a for a, b in itertools.pairwise(to_ada)]
    assert min(gaps) >= 1.0 - SLACK, gaps
    both = next(d for d in django_stack.delivered if d.message["Subject"] == "both")
    assert sorted(both.rcpt_tos) == ["ada@example.com", "bob@example.com"], "one transaction"


def test_enqueue_errors_raise_unless_fail_silently(django_stack: SmtpTestServer) -> None:
    """A bad address is refused at enqueue: Django's send raises; fail_silently returns 0."""
    bad = mail.EmailMessage("s", "b", to=["not an address"])
    with pytest.raises(ValueError, match=r"to\[0\]"):
        bad.send()
    silent = mail.EmailMessage("s", "b", to=["not an address"])  # send() keeps its connection
    assert silent.send(fail_silently=True) == 0


def test_a_message_travels_whole_with_djangos_envelope() -> None:
    """The task's arguments are Django's envelope (to, cc, bcc; from_email, not a From header)
    and the message Django builds, its headers as the application set them (no Sender added)."""
    message = mail.EmailMessage(
        "s",
        "b",
        to=["ada@example.com"],
        bcc=["audit@example.org"],
        headers={"From": "Desk <desk@example.org>", "Reply-To": "help@example.org", "X-A": "1"},
    )
    kwargs = task_kwargs(message)
    assert set(kwargs) == {"to", "bcc", "from_email", "mime"}
    assert kwargs["to"] == ["ada@example.com"] and kwargs["bcc"] == ["audit@example.org"]
    assert kwargs["from_email"] == "Shop <orders@example.org>"
    carried = email.message_from_bytes(
        base64.b64decode(kwargs["mime"]), policy=email.policy.default
    )
    assert (
        carried["From"] == "Desk <desk@example.org>" and carried["Reply-To"] == "help@example.org"
    )
    assert carried["X-A"] == "1" and carried["Sender"] is None and carried["Bcc"] is None
    check_arguments([], kwargs)


@pytest.mark.parametrize(
    "build",
    [
        lambda m: m.attach_alternative("{}", "application/json"),
        lambda m: m.attach(MIMEMultipart("mixed")),
        lambda m: m.extra_headers.update({"To": "list@example.com"}),
    ],
)
def test_any_message_django_builds_is_carried(
    build: Callable[[EmailMultiAlternatives], object],
) -> None:
    """Another alternative than HTML, a multipart MIME attachment, a To header that shows a
    list: Django builds them, so they are carried (the corpus test proves they arrive)."""
    message = EmailMultiAlternatives("s", "b", to=["ada@example.com"])
    build(message)
    check_arguments([], task_kwargs(message))


def test_a_header_with_a_newline_raises_djangos_error_unless_fail_silently() -> None:
    """Header injection: Django's own BadHeaderError when the message is built (nothing is
    enqueued); with fail_silently the message counts 0."""
    for fail_silently in (False, True):
        message = EmailMultiAlternatives("s", "b", to=["ada@example.com"])
        message.extra_headers["X-Evil"] = "a\nBcc: eve@example.com"
        if fail_silently:
            assert message.send(fail_silently=True) == 0
        else:
            with pytest.raises(BadHeaderError):
                message.send()


@pytest.mark.timeout(120)
def test_a_parked_django_message_is_sent_whole_at_its_slot(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """Two messages to ada under ``1/3s`` with ``PARK_AFTER=1s``: the second waits 3 s, so it
    is parked in the schedule with its whole message and promoted at its slot; both arrive once,
    each the bytes Django builds (but for what Django makes anew per build)."""
    env = worker_env(
        redis_url, smtp_server.url, MAILGUARD_POLICY="1/3s, 50/1h", MAILGUARD_PARK_AFTER="1s"
    )
    ledger_url = redis_url.rsplit("/", 1)[0] + "/0"  # the workers' schedule: worker_env's db 0
    client = redis.Redis.from_url(ledger_url)
    schedule = RedisSchedule(client, ledger_url)
    previous = celery.current_app._get_current_object()
    app = client_app(env)
    app.set_current()
    worker = CeleryWorker(env).start()
    messages = []
    for n in range(2):
        message = EmailMultiAlternatives(f"n{n}", "From the shop:\n", to=["ada@example.com"])
        message.attach_alternative("<p>hi</p>", "text/html")
        message.attach("a.csv", "a,b\n", "text/csv")
        messages.append(message)
    try:
        assert mail.get_connection().send_messages(messages) == 2
        results = [app.AsyncResult(m.mailguard_ids[0]) for m in messages]
        poll(lambda: any(r.state == "DEFERRED" for r in results), 10, "the booked message")
        deferred = next(r for r in results if r.state == "DEFERRED")
        assert deferred.info["wait"] > 1, "long enough to park"
        poll(lambda: schedule.stats().parked == 1, 10, "the message in the schedule")
        outcomes = [r.get(timeout=30) for r in results]
    finally:
        worker.stop()
        app.close()
        client.close()
        previous.set_current()
    assert [o["status"] for o in outcomes] == ["sent", "sent"], outcomes
    assert len(smtp_server.delivered) == 2
    for delivered in smtp_server.delivered:
        (built,) = [m for m in messages if m.subject == delivered.message["Subject"]]
        wire = built.message().as_bytes(linesep="\r\n")
        assert normalised(delivered.content.rstrip(b"\r\n")) == normalised(wire.rstrip(b"\r\n"))


def test_a_broker_down_raises_not_enqueued_unless_fail_silently(
    own_redis: RedisServer, smtp_server: SmtpTestServer
) -> None:
    """Given the project's Redis (broker, ledger, results) stopped, when Django sends, then it
    raises mailguard's ``NotEnqueued`` within ``MAILGUARD_ENQUEUE_TIMEOUT`` (the mail not
    enqueued, sending again safe); with ``fail_silently`` the message is not counted."""
    env = worker_env(own_redis.url, smtp_server.url, MAILGUARD_ENQUEUE_TIMEOUT="1s")
    old = process_settings.use_settings(Settings.from_env(env))
    app = client_app(env)
    previous = celery.current_app._get_current_object()
    app.set_current()
    own_redis.stop()
    try:
        with pytest.raises(NotEnqueued, match=r"mail not enqueued: the .* safe"):
            mail.EmailMessage("s", "b", to=["ada@example.com"]).send()
        assert mail.EmailMessage("s", "b", to=["ada@example.com"]).send(fail_silently=True) == 0
    finally:
        previous.set_current()
        app.close()
        process_settings.use_settings(old)
