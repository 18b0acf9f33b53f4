"""Django's own ``BaseEmailBackendTests`` (tests/mail/tests.py, vendored in tests/django_upstream/)
against ``workers.django.EmailBackend``: a real Django, a real Celery worker, Redis and the
suite's SMTP server. The mailbox is what the SMTP server received, read once every task enqueued
since the last flush has finished. Django's settings stay at their defaults
(``DEFAULT_FROM_EMAIL = "webmaster@localhost"``, ``SERVER_EMAIL = "root@localhost"``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from email.message import EmailMessage as PyEmailMessage
from typing import Any, ClassVar

import celery
import django
import pytest
import redis
from django.conf import settings

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.redis_servers import RedisServer
from tests.smtp_server import SmtpTestServer

if not settings.configured:
    settings.configure(EMAIL_BACKEND="workers.django.EmailBackend")
    django.setup()

from django.core import mail
from django.core.mail import EmailMessage, send_mail
from django.test import SimpleTestCase, override_settings
from django.utils.translation import gettext_lazy

from tests.django_upstream.mail_tests import BaseEmailBackendTests, message_from_bytes
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


@pytest.fixture(autouse=True, scope="class")
def _stack_on_class(
    request: pytest.FixtureRequest, worker_stack: tuple[SmtpTestServer, celery.Celery]
) -> None:
    request.cls.smtp, request.cls.app = worker_stack


@override_settings(DEFAULT_FROM_EMAIL="webmaster@localhost", SERVER_EMAIL="root@localhost")
class MailguardBackendTests(BaseEmailBackendTests, SimpleTestCase):  # type: ignore[misc]
    """Upstream's backend tests; only the mailbox and one order assertion are mailguard's."""

    email_backend = "tests.test_django_parity.RecordingBackend"
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
