"""Django's own ``BaseEmailBackendTests`` (Django's tests/mail/tests.py, in django_upstream/)
against ``workers.django.EmailBackend``: a real Django, a real Celery worker, Redis and the
suite's SMTP server. The mailbox is what the SMTP server received, read once every task enqueued
since the last flush has finished. Upstream's tests run with Django's default senders
(``DEFAULT_FROM_EMAIL = "webmaster@localhost"``, ``SERVER_EMAIL = "root@localhost"``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from email.message import EmailMessage as PyEmailMessage
from email.mime.image import MIMEImage
from typing import Any, ClassVar

import celery
import django
import pytest
import redis
from django.conf import settings

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.redis_servers import RedisServer
from devservers.smtp_server import Delivered, SmtpTestServer

if not settings.configured:  # as workers/django/test_django.py does: whichever is imported first
    settings.configure(
        EMAIL_BACKEND="workers.django.EmailBackend",
        DEFAULT_FROM_EMAIL="Shop <orders@example.org>",
    )
    django.setup()

from django.core import mail
from django.core.mail import BadHeaderError, EmailMessage, EmailMultiAlternatives, send_mail
from django.test import SimpleTestCase, override_settings
from django.utils.translation import gettext_lazy

from tests.workers.django.django_upstream.mail_tests import (
    BaseEmailBackendTests,
    message_from_bytes,
)
from workers.django import EmailBackend

TASK_TIMEOUT = 30.0  # seconds for one task to finish (a generous policy: none waits)


class RecordingBackend(EmailBackend):
    """mailguard's backend, unchanged, that also notes the task ids it set on each message
    (``message.mailguard_ids``), so the mailbox can wait for exactly those tasks."""

    task_ids: ClassVar[list[str]] = []

    def send_messages(self, email_messages: Iterable[Any]) -> int:
        messages = list(email_messages)
        sent = super().send_messages(messages)
        for message in messages:
            RecordingBackend.task_ids.extend(message.mailguard_ids)
        return int(sent)


@pytest.fixture(scope="module")
def worker_stack(redis_server: RedisServer) -> Iterator[tuple[SmtpTestServer, celery.Celery]]:
    """One SMTP server and one worker for the module; the worker's app made current, as a
    Django project's Celery app would be. The policy leaves room for every test's mails."""
    if redis_server.process is None or not redis_server.ping():
        redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    server = SmtpTestServer().start()
    env = worker_env(redis_server.url, server.url, MAILGUARD_POLICY="1000/1s")
    previous = celery.current_app._get_current_object()
    app = client_app(env)
    app.set_current()
    worker = CeleryWorker(env).start()
    try:
        yield server, app
    finally:
        worker.stop()
        app.close()
        previous.set_current()
        server.stop()


@pytest.fixture(scope="class")
def _stack_on_class(
    request: pytest.FixtureRequest, worker_stack: tuple[SmtpTestServer, celery.Celery]
) -> None:
    request.cls.smtp, request.cls.app = worker_stack


@pytest.mark.usefixtures("_stack_on_class")
@override_settings(DEFAULT_FROM_EMAIL="webmaster@localhost", SERVER_EMAIL="root@localhost")
class MailguardBackendTests(BaseEmailBackendTests, SimpleTestCase):  # type: ignore[misc]
    """Upstream's backend tests; only the mailbox and one order assertion are mailguard's."""

    email_backend = "tests.workers.django.test_django_parity.RecordingBackend"
    smtp: ClassVar[SmtpTestServer]
    app: ClassVar[celery.Celery]
    seen = 0  # delivered messages before the last flush

    def setUp(self) -> None:
        super().setUp()
        self.flush_mailbox()

    def _finish_tasks(self) -> None:
        """Wait for every task enqueued since the last flush; fail naming any not sent."""
        ids, RecordingBackend.task_ids[:] = list(RecordingBackend.task_ids), []
        for task_id in ids:
            outcome = self.app.AsyncResult(task_id).get(timeout=TASK_TIMEOUT)
            if outcome.get("status") != "sent":
                shown = {k: outcome.get(k) for k in ("status", "reason", "detail")}
                raise AssertionError(f"task {task_id} not sent: {shown}")

    def get_mailbox_content(self) -> list[PyEmailMessage]:
        """What the SMTP server received, parsed as Django's SMTPBackendTests parse it: the
        data without its trailing whitespace (the CRLF smtplib ends DATA with)."""
        self._finish_tasks()
        return [message_from_bytes(d.content.rstrip()) for d in self.smtp.delivered[self.seen :]]

    def flush_mailbox(self) -> None:
        self._finish_tasks()
        self.seen = len(self.smtp.delivered)

    def test_send_many(self) -> None:
        """Upstream's test_send_many, but the two mails are compared as a set: they are two
        tasks, and a queue with several worker processes need not deliver them in the order
        they were enqueued (upstream asserts messages[0] is to-1 and messages[1] to-2)."""
        email1 = EmailMessage(to=["to-1@example.com"])
        email2 = EmailMessage(to=["to-2@example.com"])
        for emails_list in ([email1, email2], iter((email1, email2))):
            with self.subTest(emails_list=repr(emails_list)):
                num_sent = mail.get_connection().send_messages(emails_list)
                self.assertEqual(num_sent, 2)
                messages = self.get_mailbox_content()
                self.assertEqual(len(messages), 2)
                self.assertEqual(
                    sorted(m["To"] for m in messages), ["to-1@example.com", "to-2@example.com"]
                )
                self.flush_mailbox()

    def test_recipient_without_domain(self) -> None:
        """Upstream sends from ``tester`` to ``django`` (no @-sign) and expects them in the
        headers. mailguard deliberately refuses a bare name at enqueue (RFC 5321 wants
        ``local@domain``; a bare name is far more often a bug than a mailbox the relay
        qualifies): Django's send raises ValueError naming the argument, nothing is queued."""
        with self.assertRaisesRegex(ValueError, "no @-sign"):
            send_mail("Subject", "Content", "tester", ["django"])
        self.assertEqual(self.get_mailbox_content(), [])
        self.assertTrue(send_mail("Subject", "Content", "tester@mailhost", ["django@mailhost"]))
        message = self.get_the_message()
        self.assertEqual(message.get("from"), "tester@mailhost")
        self.assertEqual(message.get("to"), "django@mailhost")

    def test_lazy_addresses(self) -> None:
        """Upstream's test_lazy_addresses (#24416: lazy translation strings as addresses) with
        a domain on each address: upstream's are bare names, which mailguard refuses (see
        test_recipient_without_domain). Every lazy string still goes through the backend."""
        _ = gettext_lazy
        self.assertTrue(send_mail("Subject", "Content", _("tester@h"), [_("django@h")]))
        message = self.get_the_message()
        self.assertEqual(message.get("from"), "tester@h")
        self.assertEqual(message.get("to"), "django@h")

        self.flush_mailbox()
        m = EmailMessage(
            from_email=_("tester@h"),
            to=[_("to1@h"), _("to2@h")],
            cc=[_("cc1@h"), _("cc2@h")],
            bcc=[_("bcc@h")],
            reply_to=[_("reply@h")],
        )
        self.assertEqual(m.recipients(), ["to1@h", "to2@h", "cc1@h", "cc2@h", "bcc@h"])
        m.send()
        message = self.get_the_message()
        self.assertEqual(message.get("from"), "tester@h")
        self.assertEqual(message.get("to"), "to1@h, to2@h")
        self.assertEqual(message.get("cc"), "cc1@h, cc2@h")
        self.assertEqual(message.get("Reply-To"), "reply@h")

    # Django 5.2's SMTPBackendTests (tests/mail/tests.py) that send a message, reimplemented for
    # mailguard's backend: upstream's versions read smtplib's socket or mock the connection.
    # The cases (addresses, messages) are Django's: BSD licence, django_upstream/LICENSE.

    def get_smtp_envelopes(self) -> list[dict[str, Any]]:
        """The envelopes the SMTP server received since the last flush, as upstream's reads."""
        self._finish_tasks()
        return [
            {"mail_from": d.mail_from, "rcpt_tos": list(d.rcpt_tos)}
            for d in self.smtp.delivered[self.seen :]
        ]

    def test_email_msg_uses_crlf(self) -> None:
        """#23063: what reaches the server has CRLF line ends only (upstream reads smtplib's
        socket; here the server's copy of the data)."""
        email = EmailMessage(
            "Subject", "Content\nline\rtwo", "from@example.com", ["to@example.com"]
        )
        mail.get_connection().send_messages([email])
        self._finish_tasks()
        (delivered,) = self.smtp.delivered[self.seen :]
        rest = delivered.content.replace(b"\r\n", b"")
        self.assertNotIn(b"\r", rest)
        self.assertNotIn(b"\n", rest)

    def test_send_messages_empty_list(self) -> None:
        self.assertEqual(mail.get_connection().send_messages([]), 0)

    def test_send_messages_zero_sent(self) -> None:
        """A message without recipients is not sent (nothing is enqueued)."""
        email = EmailMessage("Subject", "Content", "from@example.com", to=[])
        self.assertEqual(mail.get_connection().send_messages([email]), 0)
        self.assertEqual(email.mailguard_ids, [])

    def test_avoids_sending_to_invalid_addresses(self) -> None:
        """Invalid envelope addresses never reach SMTP commands: each raises ValueError at
        enqueue (upstream matches Django's "Invalid address" text; mailguard's names the
        argument, or Django's BadHeaderError for a newline)."""
        for email_address in (
            "to@other.com@example.com",
            "to@other.com <to@example.com>",
            "@",
            "to@",
            "@example.com",
            '"evil@example.com\r\nto"@example.com',
            "to\nevil@example.com",
        ):
            with self.subTest(email_address=email_address):
                email = EmailMessage(bcc=[email_address])
                with self.assertRaises(ValueError):
                    mail.get_connection().send_messages([email])
                self.assertEqual(email.mailguard_ids, [])
        self.assertEqual(self.get_smtp_envelopes(), [])

    def test_encodes_idna_in_smtp_commands(self) -> None:
        """Non-ASCII domains are encoded for the envelope, which differs from the headers."""
        email = EmailMessage(
            from_email="lists@discussão.example.org",
            to=["To Example <to@漢字.example.com>"],
            bcc=["monitor@discussão.example.org"],
            headers={
                "From": "Gestor de listas <lists@discussão.example.org>",
                "To": "Discussão Django <django@discussão.example.org>",
            },
        )
        mail.get_connection().send_messages([email])
        envelope = self.get_smtp_envelopes()[0]
        self.assertEqual(envelope["mail_from"], "lists@xn--discusso-xza.example.org")
        self.assertEqual(
            envelope["rcpt_tos"],
            ["to@xn--p8s937b.example.com", "monitor@xn--discusso-xza.example.org"],
        )
        message = self.get_the_message()
        self.assertEqual(message["To"].addresses[0].username, "django")


# What Django users send every day, beyond upstream's tests (issue 23, item 5): each through the
# backend, the worker and the SMTP server, read back from what the server received.

PNG = b"\x89PNG\r\n\x1a\n\x00not really an image"


def _deliver(
    stack: tuple[SmtpTestServer, celery.Celery], *messages: EmailMessage
) -> list[Delivered]:
    """Send ``messages`` through ``workers.django.EmailBackend``; wait for their tasks; what
    the server received meanwhile."""
    server, app = stack
    before = len(server.delivered)
    connection = mail.get_connection("workers.django.EmailBackend")
    assert connection.send_messages(list(messages)) == len(messages)
    for message in messages:
        (task_id,) = message.mailguard_ids
        outcome = app.AsyncResult(task_id).get(timeout=TASK_TIMEOUT)
        assert outcome["status"] == "sent", outcome
    return server.delivered[before:]


def test_send_messages_sets_the_task_ids_on_each_message(
    worker_stack: tuple[SmtpTestServer, celery.Celery],
) -> None:
    """``message.mailguard_ids`` is the task's id (its AsyncResult reads the outcome); a
    message with no recipient enqueues nothing and gets ``[]``."""
    app = worker_stack[1]
    sent = EmailMessage("ids", "b", "from@example.com", ["ada@example.com"])
    nobody = EmailMessage("none", "b", "from@example.com")
    assert mail.get_connection().send_messages([sent, nobody]) == 1
    assert nobody.mailguard_ids == []
    (task_id,) = sent.mailguard_ids
    outcome = app.AsyncResult(task_id).get(timeout=TASK_TIMEOUT)
    assert outcome["status"] == "sent" and outcome["mail_id"] == task_id


def test_display_names_empty_and_lazy_addresses(
    worker_stack: tuple[SmtpTestServer, celery.Celery],
) -> None:
    """Display names stay in To/Cc, the envelope has the addresses alone; empty strings are
    dropped and lazy strings sent, as Django does."""
    message = EmailMessage(
        "names",
        "b",
        gettext_lazy("Desk <desk@example.org>"),
        ["Ada Lovelace <ada@example.com>", ""],
        cc=["", gettext_lazy('"Lord Byron" <byron@example.com>')],
    )
    (got,) = _deliver(worker_stack, message)
    assert sorted(got.rcpt_tos) == ["ada@example.com", "byron@example.com"]
    assert got.mail_from == "desk@example.org"
    assert got.message["To"] == "Ada Lovelace <ada@example.com>"
    assert got.message["Cc"] == "Lord Byron <byron@example.com>"


def test_an_idn_sender_goes_in_punycode_in_from_and_mail_from(
    worker_stack: tuple[SmtpTestServer, celery.Celery],
) -> None:
    """``from@öäü.com`` is ``from@xn--4ca9at.com`` in From and MAIL FROM, as the recipients
    are: a server without SMTPUTF8 takes it."""
    (got,) = _deliver(worker_stack, EmailMessage("idn", "b", "Jö <from@öäü.com>", ["to@öäü.com"]))
    assert got.mail_from == "from@xn--4ca9at.com" and got.rcpt_tos == ("to@xn--4ca9at.com",)
    assert got.message["From"].addresses[0].addr_spec == "from@xn--4ca9at.com"
    assert got.message["From"].addresses[0].display_name == "Jö"


def test_attachments_keep_charset_inline_images_and_attached_messages(
    worker_stack: tuple[SmtpTestServer, celery.Celery],
) -> None:
    """A text attachment keeps ``charset=utf-8``; an inline MIMEImage keeps its Content-ID and
    its place in the multipart/mixed where Django puts it (multipart/related only when the
    message's ``mixed_subtype`` says so, as Django does); a message/rfc822 attachment is the
    message itself, neither base64 nor ``filename="None"``."""
    message = EmailMultiAlternatives("files", "text", "from@example.com", ["ada@example.com"])
    message.attach_alternative('<p><img src="cid:logo@shop"></p>', "text/html")
    message.attach("names.txt", "Firstname Sürname\n", "text/plain")
    image = MIMEImage(PNG, "png")
    image.add_header("Content-ID", "<logo@shop>")
    image.add_header("Content-Disposition", "inline")
    message.attach(image)
    message.attach(
        None, EmailMessage("inner", "Inner body", to=["b@example.com"]), "message/rfc822"
    )
    (got,) = _deliver(worker_stack, message)
    raw = got.content.decode("utf-8", "replace")
    parsed = got.message
    text = next(p for p in parsed.walk() if p.get_filename() == "names.txt")
    assert text.get_content_charset() == "utf-8"
    assert text.get_content().replace("\r\n", "\n") == "Firstname Sürname\n"
    assert parsed.get_content_type() == "multipart/mixed"
    alternative, _, logo, _ = parsed.get_payload()
    assert alternative.get_content_type() == "multipart/alternative"
    assert logo["Content-ID"] == "<logo@shop>" and logo.get_content_disposition() == "inline"
    assert logo.get_payload(decode=True) == PNG
    attached = next(p for p in parsed.walk() if p.get_content_type() == "message/rfc822")
    assert attached.get_payload(0)["Subject"] == "inner"
    assert 'filename="None"' not in raw and "filename=None" not in raw
    assert attached["Content-Transfer-Encoding"] in (None, "7bit", "8bit")


def test_html_body_and_encoding(worker_stack: tuple[SmtpTestServer, celery.Celery]) -> None:
    """``content_subtype = "html"`` sends the body as text/html alone; ``encoding`` is the
    body's charset."""
    html = EmailMessage("html", "<p>Hi</p>", "from@example.com", ["ada@example.com"])
    html.content_subtype = "html"
    latin = EmailMessage("latin", "Grüße", "from@example.com", ["bob@example.com"])
    latin.encoding = "iso-8859-1"
    got = {d.message["Subject"]: d.message for d in _deliver(worker_stack, html, latin)}
    assert got["html"].get_content_type() == "text/html"
    assert got["html"].get_content().rstrip() == "<p>Hi</p>"
    assert got["latin"].get_content_charset() == "iso-8859-1"
    assert got["latin"].get_content().rstrip() == "Grüße"


def test_headers_as_django_treats_them(worker_stack: tuple[SmtpTestServer, celery.Celery]) -> None:
    """A Reply-To header wins over reply_to; a From header is the From while from_email is
    the envelope sender (no Sender header: Django adds none); a user Message-ID and Date are
    kept (threading)."""
    message = EmailMessage(
        "headers",
        "b",
        "bounces@example.com",
        ["ada@example.com"],
        reply_to=["ignored@example.com"],
        headers={
            "Reply-To": "Help <help@example.org>",
            "From": "Shop <shop@example.org>",
            "Message-ID": "<thread-1@example.org>",
            "Date": "Tue, 24 Nov 2026 10:00:00 +0000",
        },
    )
    (got,) = _deliver(worker_stack, message)
    assert got.message["Reply-To"] == "Help <help@example.org>"
    assert got.message["From"] == "Shop <shop@example.org>"
    assert got.mail_from == "bounces@example.com"
    assert got.message["Sender"] is None
    assert got.message["Message-ID"] == "<thread-1@example.org>"
    assert got.message["Date"] == "Tue, 24 Nov 2026 10:00:00 +0000"
    assert got.rcpt_tos == ("ada@example.com",)


@pytest.mark.parametrize(
    "build",
    [
        lambda: EmailMessage("s\nBcc: eve@example.com", "b", "f@example.com", ["a@example.com"]),
        lambda: EmailMessage("s", "b", "f@example.com", ["a@example.com\nBcc: eve@example.com"]),
        lambda: EmailMessage("s", "b", "f@example.com", ["a@example.com"], headers={"X": "1\r2"}),
    ],
)
def test_header_injection_raises_djangos_bad_header_error(build: Any) -> None:
    """Django callers catch ``BadHeaderError``: a newline in the subject, an address or a
    header raises it before anything is enqueued (a ValueError too, as Django's is)."""
    message = build()
    with pytest.raises(BadHeaderError, match="Header values can't contain newlines"):
        message.send()
    assert message.mailguard_ids == []
