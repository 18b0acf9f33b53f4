"""Headers as the RFCs write them, read where each transport delivers the message: the raw bytes
the suite's aiosmtpd server received (the ``smtp`` transport, and the ``django`` transport with
Django's SMTP backend), the raw message moto's SES v2 server stored (the ``ses`` transport, and
the ``anymail`` transport with Anymail's ``amazon_ses`` backend, which writes the raw MIME
itself), read by a strict RFC 2369 / RFC 8058 reader (:mod:`tests.mail.rfc2369_reader`).

Anymail's other ESPs post fields to an HTTP API, and no real ESP is reachable from here: the
``postmark`` case uses the stand-in the Anymail tests use
(:mod:`tests.mail.transports.postmark_server`) and reads the header values Anymail posts (the ESP
writes the wire form itself). Each guard is built from ``MAILGUARD_*`` variables as a worker
builds it, its limiter and ledger in memory.
"""

from __future__ import annotations

import email
import email.policy
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import boto3
import django
import pytest
from django.conf import settings
from django.test.utils import override_settings
from moto.core import DEFAULT_ACCOUNT_ID
from moto.server import ThreadedMotoServer
from moto.ses.models import ses_backends

from devservers.smtp_server import SmtpTestServer
from mailer.errors import InvalidMessage
from mailer.factory import build_guard
from mailer.guard import Finish, MailRequest
from mailer.mail.message import Mail, build_message
from mailer.mail.mime import fold_at_spaces
from mailer.mail.transports.base import wire_bytes
from mailer.metrics import NO_METRICS
from mailer.settings import Settings
from mailer.unsubscribe import Signer
from tests.mail import rfc2369_reader as rfc
from tests.mail.transports.postmark_server import PostmarkStub

if not settings.configured:  # as tests/workers/django/test_django.py does: whichever is first
    settings.configure(
        EMAIL_BACKEND="workers.django.EmailBackend",
        DEFAULT_FROM_EMAIL="Shop <orders@example.org>",
    )
    django.setup()

REGION = "eu-west-1"
ADA = "ada@example.com"
SECRET = "test-secret"
MAILTO = "mailto:unsubscribe@example.org?subject=unsubscribe"
#: URL lengths in characters: short, around the 78-character line, up to 900.
LENGTHS = (20, 60, 77, 78, 79, 120, 400, 900)
WIRES = ("smtp", "django", "ses", "anymail-ses")
SUBJECT = "Chère maman, votre commande n°42 est partie — suivez-la en un clic ici"
LIST_ID = "Nouvelles élégantes de la Boutique, chaque semaine <news.example.org>"

Send = Callable[[dict[str, str], MailRequest], bytes]


def url_of(length: int) -> str:
    """An https URL of exactly ``length`` characters, with query characters in it."""
    head = "https://ex.org/u?t="
    fill = "Ab0-._~%2F&k=v;"
    body = (fill * (length // len(fill) + 1))[: length - len(head)]
    url = head + body
    if "%" in url[-2:]:  # a percent sign cut from its two hex digits
        url = url[:-2] + "xy"
    assert len(url) == length
    return url


def msg_id(length: int) -> str:
    """A message id (``<left@right>``) of ``length`` characters."""
    return "<" + "r" * (length - len("<@example.org>")) + "@example.org>"


@pytest.fixture(autouse=True)
def aws_region(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dummy credentials (``aws_env``) and this test's region."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[SmtpTestServer, str]]:
    """The suite's aiosmtpd server and moto's SES v2 (``example.org`` verified), on 127.0.0.1."""
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    url = f"http://{host}:{port}"
    boto3.client(
        "sesv2",
        region_name=REGION,
        endpoint_url=url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_email_identity(EmailIdentity="example.org")
    smtp = SmtpTestServer().start()
    try:
        yield smtp, url
    finally:
        smtp.stop()
        moto.stop()


def _sent(env: dict[str, str], request: MailRequest) -> None:
    """``request`` through a guard built from ``env`` (and the fixed variables); it must go."""
    env = {
        "MAILGUARD_SENDER": "Shop <orders@example.org>",
        "MAILGUARD_POLICY": "1000/1s",
        "MAILGUARD_SECRET": SECRET,
        **env,
    }
    step = build_guard(Settings.from_env(env), metrics=NO_METRICS).process(request)
    assert isinstance(step, Finish) and step.outcome.status == "sent", step


@pytest.fixture(params=WIRES)
def send(
    request: pytest.FixtureRequest,
    servers: tuple[SmtpTestServer, str],
    monkeypatch: pytest.MonkeyPatch,
) -> Send:
    """Sends a mail through one transport; answers the raw bytes where it landed."""
    smtp, ses_url = servers
    wire = request.param

    def through_smtp(env: dict[str, str], mail: MailRequest) -> bytes:
        before = len(smtp.delivered)
        if wire == "smtp":
            _sent({"MAILGUARD_SMTP_URL": smtp.url, **env}, mail)
        else:  # Django's SMTP backend, Django's EMAIL_* settings
            backend = {"MAILGUARD_DJANGO_BACKEND": "django.core.mail.backends.smtp.EmailBackend"}
            with override_settings(EMAIL_HOST="127.0.0.1", EMAIL_PORT=smtp.port, EMAIL_TIMEOUT=10):
                _sent({"MAILGUARD_TRANSPORT": "django", **backend, **env}, mail)
        [delivered] = smtp.delivered[before:]
        assert delivered.rcpt_tos == (ADA,)
        return delivered.content

    def through_ses(env: dict[str, str], mail: MailRequest) -> bytes:
        stored = ses_backends[DEFAULT_ACCOUNT_ID][REGION].sent_messages
        before = len(stored)
        if wire == "ses":
            where = {"MAILGUARD_SES_REGION": REGION, "MAILGUARD_SES_ENDPOINT_URL": ses_url}
            _sent({"MAILGUARD_TRANSPORT": "ses", **where, **env}, mail)
        else:  # Anymail's SES backend: its boto3 client reaches moto by boto3's own variable
            monkeypatch.setenv("AWS_ENDPOINT_URL_SESV2", ses_url)
            esp = {"MAILGUARD_TRANSPORT": "anymail", "MAILGUARD_ANYMAIL_ESP": "amazon_ses"}
            _sent({**esp, **env}, mail)
        [raw] = list(stored)[before:]
        return str(raw.raw_data).encode("ascii")

    return through_smtp if wire in ("smtp", "django") else through_ses


def _request(**fields: Any) -> MailRequest:
    fields.setdefault("subject", "Your order")
    return MailRequest(to=ADA, mail_id=f"h-{uuid.uuid4()}", body="Shipped.", **fields)


def _thread_headers(length: int) -> dict[str, str]:
    """The other headers a caller writes with ids and URIs: a long Message-ID, References and
    In-Reply-To, a List-Id, an X- header holding a URL among words."""
    long_id = msg_id(min(length, 900))
    return {
        "Message-ID": msg_id(max(length, 20)),
        "References": f"<first@example.org> {long_id}",
        "In-Reply-To": long_id,
        "List-Id": "Shop news, weekly <news.example.org>",
        "X-Report": f"see {url_of(length)} for the details of this order",
    }


@pytest.mark.parametrize("length", LENGTHS)
def test_a_callers_unsubscribe_uris_and_ids_reach_the_wire_as_the_rfcs_write_them(
    send: Send, length: int
) -> None:
    """A mailto and an https URL of 20 to 900 characters: the strict reader reads both, intact;
    each other ASCII header unfolds to exactly what was given, no encoded word anywhere but the
    non-ASCII Subject, which keeps RFC 2047 and reads back as written."""
    url = url_of(length)
    given = {
        "List-Unsubscribe": f"<{MAILTO}>, <{url}>",
        "List-Unsubscribe-Post": rfc.ONE_CLICK,
        **_thread_headers(length),
    }
    raw = send({}, _request(subject=SUBJECT, headers=given))
    assert rfc.one_click_uris(raw) == [MAILTO, url]
    fields = rfc.header_fields(raw)
    for name, value in given.items():
        field = rfc.the_field(fields, name)
        assert field.value == value, name
        assert not any("=?" in line for line in field.lines), name
    encoded = [f for f in fields if any("=?" in line for line in f.lines)]
    assert [f.name for f in encoded] == ["Subject"]
    assert all(line.strip().startswith("=?utf-8?") for line in encoded[0].lines[1:])
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert parsed["Subject"] == SUBJECT


@pytest.mark.parametrize(
    "base", ["https://ex.org/u", "https://example.org/" + "u" * 690], ids=["short", "long"]
)
def test_a_bulk_kinds_own_unsubscribe_header_is_read_at_the_server(send: Send, base: str) -> None:
    """A bulk kind's List-Unsubscribe (a short base, and one making the URL about 800
    characters): one https URI, the base and a token that verifies for the recipient's kind,
    and the One-Click Post header; a non-ASCII List-Id's phrase encoded, its id as it is."""
    env = {
        "MAILGUARD_KIND_NEWSLETTER_UNSUBSCRIBE": "1",
        "MAILGUARD_KIND_NEWSLETTER_MAX_WAIT": "1d",
        "MAILGUARD_UNSUBSCRIBE_URL": base,
    }
    raw = send(env, _request(kind="newsletter", headers={"List-Id": LIST_ID}))
    [uri] = rfc.one_click_uris(raw)
    assert uri.startswith(base + "/") and len(uri) > len(base) + 40
    claims = Signer(SECRET).verify(uri.rpartition("/")[2])
    assert claims.kind == "newsletter" and claims.sender == "orders@example.org"
    list_id = rfc.the_field(rfc.header_fields(raw), "List-Id")
    assert list_id.value.endswith(" <news.example.org>") and "=?utf-8?" in list_id.value
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert parsed["List-Id"] == LIST_ID


@pytest.mark.parametrize("length", LENGTHS)
def test_anymail_posts_the_header_values_a_strict_reader_reads(length: int) -> None:
    """Anymail's HTTP API ESPs (Postmark's stand-in): the values posted are the ones given,
    each read by the strict reader (the ESP writes the wire form), the Subject in clear."""
    url = url_of(length)
    given = {"List-Unsubscribe": f"<{MAILTO}>, <{url}>", "List-Unsubscribe-Post": rfc.ONE_CLICK}
    with PostmarkStub("token") as stub:
        env = {
            "MAILGUARD_TRANSPORT": "anymail",
            "MAILGUARD_ANYMAIL_ESP": "postmark",
            "ANYMAIL_POSTMARK_SERVER_TOKEN": "token",
            "ANYMAIL_POSTMARK_API_URL": stub.url,
        }
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            _sent(env, _request(subject=SUBJECT, headers={**given, **_thread_headers(length)}))
        [body] = stub.received
    posted = {h["Name"]: h["Value"] for h in body["Headers"]}
    fields = {name: rfc.Field(name, posted[name], (posted[name],)) for name in given}
    assert rfc.one_click_values(fields["List-Unsubscribe"], fields["List-Unsubscribe-Post"]) == [
        MAILTO,
        url,
    ]
    assert all(posted[name] == value for name, value in _thread_headers(length).items())
    assert body["Subject"] == SUBJECT


@pytest.mark.parametrize(
    "bad",
    [
        b"List-Unsubscribe: =?utf-8?q?=3Chttps=3A//example=2Eorg/unsubscribe/UzcwMnpTM?=\r\n"
        b" =?utf-8?q?Y6w=3E?=\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n\r\n",
        b"List-Unsubscribe: https://example.org/u\r\n"
        b"List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n\r\n",
        b"List-Unsubscribe: <mailto:u@example.org>\r\n"
        b"List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n\r\n",
        b"List-Unsubscribe: <https://example.org/u>\r\n\r\n",
        b"List-Unsubscribe: <https://example.org/u>\nList-Unsubscribe-Post: "
        b"List-Unsubscribe=One-Click\r\n\r\n",
    ],
    ids=["encoded-words", "no-brackets", "no-https", "no-post", "bare-lf"],
)
def test_the_reader_refuses_what_a_strict_reader_refuses(bad: bytes) -> None:
    """The reader is strict: the mangled form the issue saw, a bare URI, no https URI, no Post
    header, a bare LF are each refused."""
    with pytest.raises(rfc.NotReadable):
        rfc.one_click_uris(bad)


def test_folding_breaks_only_at_white_space_and_unfolds_to_the_value() -> None:
    """Lines of at most 78 characters where the words allow, a longer word whole on its own line,
    the first word on the name's line; unfolding gives back the value exactly."""
    value = "a  b\tc " + url_of(300) + " " + "word " * 30
    folded = fold_at_spaces("X-Test", value, "\r\n")
    lines = folded.removesuffix("\r\n").split("\r\n")
    assert "".join(lines) == f"X-Test: {value}"
    assert all(len(line) <= 78 or " " not in line.strip() for line in lines[1:])
    assert lines[0] == "X-Test: a  b\tc" and lines[1] == " " + url_of(300)
    alone = fold_at_spaces("List-Unsubscribe", f"<{url_of(900)}>", "\r\n")
    assert alone == f"List-Unsubscribe: <{url_of(900)}>\r\n"


def test_uri_headers_must_be_ascii_and_fit_a_line_while_a_subject_may_be_encoded() -> None:
    """A non-ASCII List-Unsubscribe or References is refused when the mail is checked (no
    encoded word may stand there), and so is a URI too long for a line of 998; a Subject of one
    998-character word still goes, encoded (RFC 2047 allows it there), no line over 998."""
    mail = Mail(to=ADA, subject="s", body="b", mail_id="m-1", sender="orders@example.org")
    for name, value, why in [
        ("List-Unsubscribe", "<https://ex.org/désabonner>", "must be ASCII"),
        ("References", "<é@example.org>", "must be ASCII"),
        ("List-Unsubscribe", f"<{url_of(996)}>", "has a word of more than 997 characters"),
    ]:
        with pytest.raises(InvalidMessage, match=f"header '{name}' {why}"):
            build_message(replace(mail, headers={name: value}))
    raw = wire_bytes(build_message(replace(mail, subject="s" * 998)))
    assert all(len(line) <= rfc.MAX_LINE for line in raw.split(b"\r\n"))
    assert email.message_from_bytes(raw, policy=email.policy.default)["Subject"] == "s" * 998
