"""Byte for byte against Django: every message of a corpus goes once through Django's own SMTP
backend and once through ``workers.django.EmailBackend`` (a real Celery worker, Redis, the
suite's aiosmtpd server), and the server must receive the same envelope and the same bytes.

The corpus is the kinds of message Django's own tests build (tests/mail/tests.py of Django
5.2: ``MailTests`` and ``BaseEmailBackendTests``; each case names the test it follows). The
cases are written here, not copied (Django's code is BSD-licensed, Copyright (c) Django Software
Foundation and individual contributors; see django_upstream/LICENSE here). Only what differs
between two sends of one message by Django itself is normalised: ``Message-ID``, ``Date`` and
the multipart boundaries (Django makes them anew each time it builds the message, a nested
message's too).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from email.charset import QP, Charset
from email.message import EmailMessage as PyEmailMessage
from email.message import Message as PyMessage
from email.mime.image import MIMEImage
from email.mime.text import MIMEText
from typing import Any

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
from django.core.mail import (
    EmailAlternative,
    EmailAttachment,
    EmailMessage,
    EmailMultiAlternatives,
)
from django.utils.translation import gettext_lazy

TASK_TIMEOUT = 30.0  # seconds for one task to finish (a generous policy: none waits)
GIF = b"GIF89a\x01\x00\x01\x00\x00\xff\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x00;"
CALENDAR = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\nSUMMARY:Tea\r\nEND:VEVENT\r\n"
    "END:VCALENDAR\r\n"
)
CYRILLIC = "А Б В Г Д Е Ж Ѕ З И І К Л М Н О П"  # noqa: RUF001 - Django's own non-Latin test text
# Message-ID and Date lines (folded continuation lines too), anywhere in the message.
_MADE_WHEN_BUILT = re.compile(
    rb"^(Message-ID|Date): [^\r\n]*\r\n(?:[ \t][^\r\n]*\r\n)*", re.M | re.I
)
_BOUNDARY = re.compile(rb'boundary="([^"]+)"')

Case = Callable[[], EmailMessage]


def _message(**kwargs: Any) -> EmailMessage:
    fields = {
        "subject": "Subject",
        "body": "Content",
        "from_email": "from@example.com",
        "to": ["to@example.com"],
    }
    return EmailMessage(**{**fields, **kwargs})


def _alternatives(*parts: tuple[str, str], **kwargs: Any) -> EmailMultiAlternatives:
    fields = {"subject": "Subject", "body": "Text", "from_email": "from@example.com"}
    message = EmailMultiAlternatives(**{"to": ["to@example.com"], **fields, **kwargs})
    for content, mimetype in parts:
        message.attach_alternative(content, mimetype)
    return message


def _attached(message: EmailMessage, *items: Any) -> EmailMessage:
    for item in items:
        if isinstance(item, tuple):
            message.attach(*item)
        else:
            message.attach(item)
    return message


def _encoded(message: EmailMessage, encoding: str) -> EmailMessage:
    message.encoding = encoding
    return message


def _html_body() -> EmailMessage:
    message = _message(body="<p>Hello <b>there</b></p>")
    message.content_subtype = "html"
    return message


def _inline_image() -> EmailMessage:
    """Django's documentation's inline image: a ``MIMEImage`` with a ``Content-ID`` attached to
    an ``EmailMultiAlternatives`` whose HTML refers to ``cid:``, the mixed part made related."""
    message = _alternatives(('<p><img src="cid:logo"></p>', "text/html"))
    image = MIMEImage(GIF, "gif")
    image.add_header("Content-ID", "<logo>")
    image.add_header("Content-Disposition", "inline", filename="logo.gif")
    message.attach(image)
    message.mixed_subtype = "related"
    return message


def _inline_with_attachment() -> EmailMessage:
    message = _inline_image()
    message.mixed_subtype = "mixed"
    return _attached(message, ("report.csv", "a,b\n1,2\n", "text/csv"))


def _text_part_with_charset() -> EmailMessage:
    return _attached(_message(), MIMEText("Grüße aus Köln", "plain", "iso-8859-1"))


def _nested_message() -> EmailMessage:
    inner = _message(subject="Inner", body="Inner body", to=["inner@example.com"])
    return _attached(_message(), ("forwarded.eml", inner, "message/rfc822"))


def _nested_python_message() -> EmailMessage:
    inner = _message(subject="Inner", to=["inner@example.com"]).message()
    return _attached(_message(), (None, inner, "message/rfc822"))


def _custom_utf8_encoding() -> EmailMessage:
    encoding = Charset("utf-8")
    encoding.body_encoding = QP
    return _encoded(_message(body="Body with latin characters: àáä."), encoding)  # type: ignore[arg-type]


def _attached_mime_image(disposition: str, filename: bool) -> EmailMessage:
    image = MIMEImage(GIF, "gif")
    image["Content-Disposition"] = disposition + ("; filename=test.gif" if filename else "")
    image["Content-ID"] = "<content-id@example.org>"
    return _message(attachments=[image])


def _python_message(modern: bool) -> PyMessage:
    message = PyEmailMessage() if modern else PyMessage()
    message["Subject"] = "child subject"
    if isinstance(message, PyEmailMessage):
        message.set_content("child body")
    else:
        message.set_payload("child body")
    return message


_8BIT_RFC822 = (
    b"Subject: A message using 8bit CTE\nContent-Type: text/plain; charset=utf-8\n"
    b"Content-Transfer-Encoding: 8bit\n\n\xc2\xa18-bit content!\n"
)
_HTML = EmailAlternative("<p>HTML</p>", "text/html")
_IMAGE = EmailAttachment("image.gif", b"\x89PNG...", "image/png")


def _rfc822() -> EmailAttachment:
    return EmailAttachment(None, EmailMessage(body="text"), "message/rfc822")


CORPUS: dict[str, Case] = {
    # MailTests: addresses and headers
    "test_ascii": _message,
    "test_multiple_recipients": lambda: _message(to=["to@example.com", "other@example.com"]),
    "test_cc": lambda: _message(cc=["cc@example.com", "cc.other@example.com"]),
    "test_bcc": lambda: _message(cc=["cc@example.com"], bcc=["bcc@example.com"]),
    "test_bcc_only_no_to_header": lambda: _message(to=[], bcc=["bcc@example.com"]),
    "test_cc_only_no_to_header": lambda: _message(to=[], cc=["cc@example.com"]),
    "test_recipients_as_tuple": lambda: _message(
        to=("to@example.com", "other@example.com"), cc=("cc@example.com",), bcc=("b@example.com",)
    ),
    "test_reply_to": lambda: _message(reply_to=["r1@example.com", "Replies <r2@example.com>"]),
    "test_to_header": lambda: _message(
        to=["list-subscriber@example.com", "list-subscriber2@example.com"],
        headers={"To": "Mailing list <mailing-list@example.com>"},
    ),
    "test_cc_header": lambda: _message(
        cc=["foo@example.com"], headers={"Cc": "override@example.com"}
    ),
    "test_reply_to_header": lambda: _message(
        reply_to=["foo@example.com"], headers={"Reply-To": "override@example.com"}
    ),
    "test_from_header": lambda: _message(
        from_email="bounce@example.com", headers={"From": "Shop <from@example.com>"}
    ),
    "test_message_header_overrides": lambda: _message(
        headers={"date": "Fri, 09 Nov 2001 01:08:47 -0000", "Message-ID": "<foo@example.com>"}
    ),
    "test_custom_and_list_headers": lambda: _message(
        headers={
            "List-Unsubscribe": "<https://example.com/unsubscribe?u=1>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
            "List-Id": "News <news.example.com>",
            "X-Mailer": "Shop 1.0",
            "Precedence": "bulk",
        }
    ),
    "test_unicode_address_header": lambda: _message(
        to=['"Firstname Sürname" <to@example.com>', "other@example.com"],
        cc=['"Sürname, Firstname" <cc@example.com>'],
    ),
    "test_unicode_headers": lambda: _message(
        subject="Gżegżółka",
        headers={
            "Sender": '"Firstname Sürname" <sender@example.com>',
            "Comments": "My Sürname is non-ASCII",
        },
    ),
    "test_idn_addresses": lambda: _message(
        from_email="Büro <from@öäü.com>", to=["to@öäü.com"], cc=["Ünïcödé <cc@bücher.de>"]
    ),
    "test_space_continuation": lambda: _message(
        subject="Long subject lines that get wrapped should contain a space continuation "
        "character to get expected behavior in Outlook and Thunderbird"
    ),
    "test_long_custom_header": lambda: _message(headers={"X-Long": "word " * 60}),
    "test_lazy_subject": lambda: _message(subject=gettext_lazy("Lazy subject")),
    "test_empty_subject_and_body": lambda: _message(subject="", body=""),
    # MailTests: bodies and encodings
    "test_encoding_latin1": lambda: _encoded(
        _message(body="Firstname Sürname is a great guy."), "iso-8859-1"
    ),
    "test_safe_mime_multipart": lambda: _encoded(
        _alternatives(
            ("<p>This is an <strong>important</strong> message.</p>", "text/html"),
            subject="Message from Firstname Sürname",
            to=['"Sürname, Firstname" <to@example.com>'],
        ),
        "iso-8859-1",
    ),
    "test_7bit": lambda: _message(body="Body with 7bit data.\n"),
    "test_8bit_latin": lambda: _message(body="Body with latin characters: àáä.\n"),
    "test_8bit_non_latin": lambda: _message(
        body=f"Body with non latin characters: {CYRILLIC[:5]}.\n"
    ),
    "test_long_lines": lambda: _message(body="Text " + "x" * 1100 + " end\nshort line\n"),
    "test_dont_mangle_from_in_body": lambda: _message(
        body="From the start\n.A line starting with a dot\n..two dots\nFrom again\n"
    ),
    "test_line_endings": lambda: _message(body="CRLF\r\nbare CR\rbare LF\ntrailing\r\n"),
    "test_html_body": _html_body,
    # MailTests: alternatives, their order and kinds
    "test_html_alternative": lambda: _alternatives(("<p>Hello</p>", "text/html")),
    "test_calendar_alternative": lambda: _alternatives(
        ("<p>Invite</p>", "text/html"), (CALENDAR, "text/calendar; method=REQUEST")
    ),
    "test_alternatives_in_their_order": lambda: _alternatives(
        ("<p>two</p>", "text/html"), ("# three", "text/markdown"), ("<p>four</p>", "text/html")
    ),
    "test_alternative_without_body": lambda: _alternatives(("<p>only</p>", "text/html"), body=""),
    "test_alternative_utf8": lambda: _alternatives(("<p>Grüße 😀</p>", "text/html")),
    # MailTests: attachments
    "test_attachments": lambda: _attached(
        _alternatives(("<p>html</p>", "text/html")), ("an attachment.pdf", b"%PDF-1.4.%", None)
    ),
    "test_attach_text_as_bytes": lambda: _attached(_message(), ("file.txt", b"file content\n")),
    "test_attach_utf8_text_as_bytes": lambda: _attached(
        _message(), ("file.txt", "ütf-8 text\n".encode())
    ),
    "test_attach_non_utf8_text_as_bytes": lambda: _attached(
        _message(), ("file.txt", b"\xff bytes that are not utf-8", "text/plain")
    ),
    "test_attach_text_str_latin1_message": lambda: _attached(
        _encoded(_message(body="Grüße"), "iso-8859-1"), ("notes.txt", "Grüße\n", "text/plain")
    ),
    "test_attach_email_attachment_tuple": lambda: _attached(
        _message(), EmailAttachment("data.csv", "a,b\n", "text/csv")
    ),
    "test_non_ascii_attachment_filename": lambda: _attached(
        _message(), ("une pièce jointe.pdf", b"%PDF-1.4.%", "application/pdf")
    ),
    "test_attach_binary_and_guessed_types": lambda: _attached(
        _message(), ("image.gif", GIF), ("archive.zip", b"PK\x03\x04" + bytes(range(256)))
    ),
    "test_attach_mime_part_with_charset": _text_part_with_charset,
    "test_attach_rfc822_message": _nested_message,
    "test_attach_python_message": _nested_python_message,
    "test_inline_image_related": _inline_image,
    "test_inline_image_and_attachment": _inline_with_attachment,
    # Django 5.2's MailTests, further cases
    "test_recipients_with_empty_strings": lambda: _message(
        to=["to@example.com", ""], cc=["cc@example.com", ""], bcc=["", "bcc@example.com"]
    ),
    "test_non_utf8_headers_multipart": lambda: _encoded(
        _alternatives(
            ("<p>This is an <strong>important</strong> message.</p>", "text/html"),
            subject="Message from Firstname Sürname",
            to=['"Sürname, Firstname" <to@example.com>'],
            headers={"Date": "Fri, 09 Nov 2001 01:08:47 -0000", "Message-ID": "foo"},
        ),
        "iso-8859-1",
    ),
    "test_multipart_with_attachments": lambda: _attached(
        _alternatives(("<p>This is <strong>html</strong></p>", "text/html"), body=""),
        ("example.txt", "Text file content", "text/plain"),
    ),
    "test_body_content_transfer_encoding": lambda: _message(
        body=f"Body with non latin characters: {CYRILLIC}.",
        from_email="bounce@example.com",
        headers={"From": "from@example.com"},
    ),
    "test_custom_utf8_encoding": _custom_utf8_encoding,
    "test_none_body": lambda: _message(body=None),
    "test_attach_mime_image": lambda: _attached_mime_image("inline", filename=False),
    "test_attach_mime_image_in_constructor": lambda: _attached_mime_image(
        "attachment", filename=True
    ),
    "test_attach_8bit_rfc822_message_non_ascii": lambda: _attached(
        _message(), ("attachment.eml", _8BIT_RFC822, "message/rfc822")
    ),
    "test_attach_rfc822_python_message": lambda: _attached(
        _message(), (None, _python_message(modern=False), "message/rfc822")
    ),
    "test_attach_rfc822_python_email_message": lambda: _attached(
        _message(), (None, _python_message(modern=True), "message/rfc822")
    ),
    "test_attach_rfc822_as_string": lambda: _attached(
        _message(), (None, _python_message(modern=False).as_string(), "message/rfc822")
    ),
    "test_attach_rfc822_as_bytes": lambda: _attached(
        _message(), (None, _python_message(modern=False).as_bytes(), "message/rfc822")
    ),
    "test_alternatives_constructor": lambda: EmailMultiAlternatives(
        to=["to@example.com"],
        alternatives=[_HTML, ("<p>two</p>", "text/html"), EmailAlternative("#3", "text/md")],
    ),
    # test_mime_structure's messages
    "test_mime_structure_single_body_with_attachment": lambda: _message(
        body="text", attachments=[_IMAGE]
    ),
    "test_mime_structure_alternative_with_attachments": lambda: EmailMultiAlternatives(
        body="text", to=["to@example.com"], alternatives=[_HTML], attachments=[_IMAGE]
    ),
    "test_mime_structure_alternative_with_rfc822": lambda: EmailMultiAlternatives(
        body="text", to=["to@example.com"], alternatives=[_HTML], attachments=[_rfc822()]
    ),
    "test_mime_structure_attachment_only": lambda: EmailMessage(
        to=["to@example.com"], attachments=[_IMAGE]
    ),
    "test_mime_structure_alternative_only": lambda: EmailMultiAlternatives(
        to=["to@example.com"], alternatives=[_HTML]
    ),
    "test_mime_structure_alternative_and_attachment_only": lambda: EmailMultiAlternatives(
        to=["to@example.com"], alternatives=[_HTML], attachments=[_IMAGE]
    ),
    "test_mime_structure_empty": lambda: EmailMessage(to=["to@example.com"]),
    "test_mime_structure_empty_alternatives": lambda: EmailMultiAlternatives(to=["to@example.com"]),
    # SMTPBackendTests: the envelope
    "test_encodes_idna_in_smtp_commands": lambda: EmailMessage(
        from_email="lists@discussão.example.org",
        to=["To Example <to@漢字.example.com>"],
        bcc=["monitor@discussão.example.org"],
        headers={
            "From": "Gestor de listas <lists@discussão.example.org>",
            "To": "Discussão Django <django@discussão.example.org>",
        },
    ),
    # (its to and bcc domains hold a zero-width joiner: see test_invisible_characters_...)
    "test_does_not_reencode_idna": lambda: EmailMessage(
        from_email='"βόλος" <from@xn--fa-hia.example.com>',
        to=['"ශ්‍රී" <cc@xn--nxasmm1c.example.com>'],
    ),
}


def normalised(content: bytes) -> bytes:
    """``content`` with what Django makes anew each time it builds a message blanked: the
    Message-ID and Date lines, the boundaries (numbered in order of appearance)."""
    for n, boundary in enumerate(dict.fromkeys(_BOUNDARY.findall(content))):
        content = content.replace(boundary, b"boundary-%d" % n)
    return _MADE_WHEN_BUILT.sub(lambda m: m.group(1) + b": <made when built>\r\n", content)


@pytest.fixture(scope="module")
def corpus_stack(redis_server: RedisServer) -> Iterator[tuple[SmtpTestServer, celery.Celery]]:
    """One SMTP server and one worker; the worker's app made current, as a Django project's
    Celery app would be. The policy leaves room for every message."""
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


def _through_django(server: SmtpTestServer, message: EmailMessage) -> Delivered:
    """What the server receives from Django's own SMTP backend for ``message``."""
    before = len(server.delivered)
    host, port = server.url.removeprefix("smtp://").rsplit(":", 1)
    smtp = "django.core.mail.backends.smtp.EmailBackend"
    with mail.get_connection(smtp, host=host, port=int(port)) as connection:
        assert connection.send_messages([message]) == 1
    (delivered,) = server.delivered[before:]
    return delivered


def _through_mailguard(
    corpus_stack: tuple[SmtpTestServer, celery.Celery], message: EmailMessage
) -> Delivered:
    """What the server receives for ``message`` through mailguard's backend and a worker."""
    server, app = corpus_stack
    before = len(server.delivered)
    connection = mail.get_connection("workers.django.EmailBackend")
    assert connection.send_messages([message]) == 1
    (task_id,) = message.mailguard_ids
    outcome = app.AsyncResult(task_id).get(timeout=TASK_TIMEOUT)
    assert outcome["status"] == "sent", outcome
    (delivered,) = server.delivered[before:]
    return delivered


def test_the_corpus_is_as_wide_as_promised() -> None:
    """Sixty or more kinds of message, each built by Django without error."""
    assert len(CORPUS) >= 60
    for build in CORPUS.values():
        assert build().message() is not None


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_mailguard_sends_what_djangos_smtp_backend_sends(
    corpus_stack: tuple[SmtpTestServer, celery.Celery], case: str
) -> None:
    """The same MAIL FROM, the same RCPT TO in the same order, and the same bytes but for the
    Message-ID and Date Django makes anew each time it builds the message."""
    expected = _through_django(corpus_stack[0], CORPUS[case]())
    got = _through_mailguard(corpus_stack, CORPUS[case]())
    assert got.mail_from == expected.mail_from
    assert got.rcpt_tos == expected.rcpt_tos
    assert normalised(got.content) == normalised(expected.content)
    assert _MADE_WHEN_BUILT.search(got.content), "Django's Message-ID and Date are sent"


def test_a_deviation_character_in_a_domain_goes_in_idna_2008(
    corpus_stack: tuple[SmtpTestServer, celery.Celery],
) -> None:
    """Deliberate difference: ``ß`` in a domain is sent as IDNA 2008 (``xn--fa-hia``, the
    domain registries use), where Django's SMTP backend encodes IDNA 2003 (``fass``, another
    domain). The message itself is Django's, byte for byte."""
    expected = _through_django(corpus_stack[0], _message(to=["to@faß.example.com"]))
    got = _through_mailguard(corpus_stack, _message(to=["to@faß.example.com"]))
    assert expected.rcpt_tos == ("to@fass.example.com",)
    assert got.rcpt_tos == ("to@xn--fa-hia.example.com",)
    assert normalised(got.content) == normalised(expected.content)


@pytest.mark.parametrize(
    "address",
    [
        '"faß" <to@xn--10cl1a0b660p.example.com>',  # a zero-width joiner in the domain
        '"نامه‌ای." <bcc@xn--mgba3gch31f060k.example.com>',  # a zero-width non-joiner
    ],
)
def test_a_domain_with_an_invisible_character_is_refused_at_enqueue(
    corpus_stack: tuple[SmtpTestServer, celery.Celery], address: str
) -> None:
    """Deliberate difference: a domain whose Unicode form holds a zero-width (non-)joiner, an
    invisible character, is refused when the message is sent (``ValueError`` naming the
    argument, nothing enqueued), where Django's SMTP backend sends to it."""
    server, _ = corpus_stack
    before = len(server.delivered)
    message = _message(to=["to@example.com"], bcc=[address])
    with pytest.raises(ValueError, match=r"bcc\[0\].*unsafe characters"):
        mail.get_connection("workers.django.EmailBackend").send_messages([message])
    assert message.mailguard_ids == []
    assert _through_django(server, _message(to=["to@example.com"], bcc=[address])).rcpt_tos[1:] == (
        address.rpartition("<")[2].rstrip(">"),
    )
    assert len(server.delivered) == before + 1, "only Django's own send arrived"
