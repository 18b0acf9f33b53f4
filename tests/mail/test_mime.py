"""Messages written as Django writes them (mailer/mail/mime.py and the builder): text parts,
header encoding, attachments that keep their charset, Content-ID and rfc822 form, the caller's
Message-ID and Date, and the send_mail arguments that carry them (old forms still accepted)."""

from __future__ import annotations

import base64
import email
import email.policy
from dataclasses import replace
from email.headerregistry import HeaderRegistry
from typing import Any

import pytest

from mailer.errors import InvalidMessage
from mailer.mail.arguments import InvalidArguments, check_arguments
from mailer.mail.envelope import attachments, charset
from mailer.mail.message import Attachment, Mail, build_message, mail_message_id, message_id
from mailer.mail.mime import MadeOnceRegistry, file_part, text_part
from workers.waiting.payload import Parked


def _mail(**changes: Any) -> Mail:
    base = Mail(
        to="ada@example.com",
        subject="Hello",
        body="Hi Ada",
        mail_id="m-1",
        sender="Shop <orders@example.org>",
    )
    return replace(base, **changes)


def _wire(message: Any) -> bytes:
    """The bytes smtplib sends (CRLF line ends)."""
    return bytes(message.as_bytes(policy=message.policy.clone(linesep="\r\n")))


def _parsed(message: Any) -> Any:
    return email.message_from_bytes(_wire(message), policy=email.policy.default)


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        ("Content", "7bit"),
        ("Je t'aime très fort", "8bit"),
        ("Grüße " * 150, "quoted-printable"),  # one line of 1200 octets,
    ],
)
def test_a_text_part_is_encoded_as_django_encodes_it(text: str, encoding: str) -> None:
    """7bit for ASCII, 8bit otherwise, quoted-printable when a line is over 998 octets; the
    text ends where it ends (no newline added)."""
    part = text_part(text, "plain", "utf-8")
    assert part["Content-Transfer-Encoding"] == encoding
    assert part["Content-Type"] == 'text/plain; charset="utf-8"'
    assert part.get_content() == text


def test_another_charset_is_the_bodys() -> None:
    """A latin-1 body is written in latin-1; a character it cannot hold is refused."""
    message = _parsed(build_message(_mail(body="Grüße", charset="iso-8859-1")))
    assert message.get_content_charset() == "iso-8859-1" and message.get_content() == "Grüße"
    with pytest.raises(InvalidMessage, match="charset"):
        build_message(_mail(body="Привет", charset="iso-8859-1"))


def test_non_ascii_headers_are_one_encoded_word_as_in_django() -> None:
    """Subject and display names: the whole text one RFC 2047 word, as Django writes them."""
    raw = _wire(build_message(_mail(subject="Chère maman", sender='"Sürname" <f@example.com>')))
    assert b"Subject: =?utf-8?q?Ch=C3=A8re_maman?=" in raw
    assert b"From: =?utf-8?q?S=C3=BCrname?= <f@example.com>" in raw
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert parsed["Subject"] == "Chère maman" and parsed["From"] == "Sürname <f@example.com>"


def test_a_non_ascii_file_name_is_encoded_as_a_parameter() -> None:
    """Only unstructured headers and display names are encoded words: a file name is an RFC
    2231 parameter, read back whole."""
    sheet = Attachment("Zürich.csv", b"a\n", "text/csv")
    message = _parsed(build_message(_mail(attachments=(sheet,), headers={"X-Note": "Grüße"})))
    (attachment,) = message.iter_attachments()
    assert attachment.get_filename() == "Zürich.csv" and message["X-Note"] == "Grüße"


def test_html_alone_is_a_text_html_message() -> None:
    """An empty body with HTML (Django's content_subtype = "html") is text/html alone."""
    message = build_message(_mail(body="", html="<p>Hi</p>"))
    assert message.get_content_type() == "text/html" and message.get_content() == "<p>Hi</p>"


def test_inline_images_sit_beside_the_html_with_their_content_id() -> None:
    """Inline parts go in a multipart/related with the HTML; other files in the mixed part."""
    logo = Attachment("", b"\x89PNG", "image/png", inline=True, content_id="<logo@shop>")
    sheet = Attachment("a.csv", b"a,b\n", "text/csv")
    message = _parsed(
        build_message(_mail(html='<img src="cid:logo@shop">', attachments=(logo, sheet)))
    )
    assert message.get_content_type() == "multipart/mixed"
    alternative, csv = message.get_payload()
    text, related = alternative.get_payload()
    html, image = related.get_payload()
    assert (text.get_content_type(), html.get_content_type()) == ("text/plain", "text/html")
    assert image["Content-ID"] == "<logo@shop>" and image.get_content_disposition() == "inline"
    assert csv.get_filename() == "a.csv" and csv.get_content_charset() == "utf-8"


def test_an_inline_part_without_html_stays_inline_in_the_mixed_part() -> None:
    logo = Attachment("logo.png", b"\x89PNG", "image/png", inline=True, content_id="<l@s>")
    message = _parsed(build_message(_mail(attachments=(logo,))))
    image = message.get_payload()[1]
    assert image["Content-ID"] == "<l@s>" and image.get_content_disposition() == "inline"


def test_attached_messages_and_text_files() -> None:
    """message/rfc822 is the message itself (no base64, no file name unless given); text keeps
    its charset; text bytes its charset cannot decode go as they are (base64)."""
    inner = b"Subject: inner\r\nTo: b@example.com\r\n\r\nInner body\r\n"
    part = file_part(inner, "message/rfc822", "")
    assert part["Content-Disposition"] is None
    assert part["Content-Transfer-Encoding"] in (None, "7bit", "8bit")
    assert part.get_payload(0)["Subject"] == "inner"
    latin = file_part("Sürname".encode("latin-1"), "text/plain", "n.txt", charset="iso-8859-1")
    assert latin.get_content_charset() == "iso-8859-1" and latin.get_content() == "Sürname"
    binary = file_part(b"\xff\xfe\x00", "text/plain", "b.txt")
    assert binary.get_payload(decode=True) == b"\xff\xfe\x00"


def test_the_callers_message_id_and_date_are_kept() -> None:
    """A Message-ID and a Date in headers replace the derived ones (threading needs them)."""
    headers = {"Message-ID": "<thread-1@example.org>", "Date": "Tue, 24 Nov 2026 10:00:00 +0000"}
    mail = _mail(headers=headers)
    message = build_message(mail, now=1_700_000_000)
    assert message["Message-ID"] == "<thread-1@example.org>" == mail_message_id(mail)
    assert message["Date"] == "Tue, 24 Nov 2026 10:00:00 +0000"
    assert mail_message_id(_mail()) == message_id("m-1", "orders@example.org")


def test_a_sender_header_is_the_envelope_sender_in_punycode() -> None:
    """``Sender`` (what the Django backend writes for a From header that differs from
    from_email) goes with its domain in Punycode: smtplib takes MAIL FROM from it."""
    message = build_message(_mail(headers={"Sender": "Desk <desk@öäü.com>"}))
    assert message["Sender"].addresses[0].addr_spec == "desk@xn--4ca9at.com"


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ({"Message-ID": "no brackets"}, "Message-ID' must be <left@right>"),
        ({"Date": "yesterday"}, "not an RFC 5322 date"),
        ({"Sender": "not an address"}, "Sender"),
    ],
)
def test_bad_message_id_date_or_sender_headers_are_refused(
    headers: dict[str, str], error: str
) -> None:
    with pytest.raises(InvalidMessage, match=error):
        build_message(_mail(headers=headers))
    with pytest.raises(InvalidArguments, match=error):
        check_arguments(["ada@example.com"], {"headers": headers})


def test_old_and_new_attachment_items_and_charset_arguments() -> None:
    """Three-item attachments (every producer so far) still go; a fourth item adds options,
    checked at enqueue and in the worker alike; charset is one Python knows."""
    data = base64.b64encode(b"x").decode()
    old = [["a.txt", data, "text/plain"]]
    new = [["", data, "image/png", {"inline": True, "content_id": "<i@h>"}]]
    check_arguments(["ada@example.com"], {"attachments": old + new, "charset": "iso-8859-1"})
    assert attachments(old)[0] == Attachment("a.txt", b"x", "text/plain")
    assert attachments(new)[0].content_id == "<i@h>" and attachments(new)[0].inline
    assert charset(None) == "utf-8" and charset("ISO-8859-1") == "iso-8859-1"
    for bad, error in [
        (
            {"attachments": [["", data, "image/png", {"inline": "yes"}]]},
            r"attachments\[0\] options",
        ),
        ({"attachments": [["", data, "image/png", {"content_id": "x"}]]}, "content_id"),
        ({"charset": "klingon"}, "charset must be"),
    ]:
        with pytest.raises(InvalidArguments, match=error):
            check_arguments(["ada@example.com"], bad)


def test_display_names_are_accepted_one_address_at_a_time() -> None:
    """``"Name <address>"`` in to/cc/bcc passes; two addresses in one string do not."""
    check_arguments(["Ada Lovelace <ada@example.com>"], {"cc": ['"B, C" <b@example.com>']})
    with pytest.raises(InvalidArguments, match="to"):
        check_arguments(["Ada <ada@example.com>, Bob <bob@example.com>"], {})


def test_a_parked_mail_keeps_charset_and_attachments_of_three_or_four_items() -> None:
    """A parked payload carries ``charset`` and four-item attachments as they were given, and
    three-item attachments (no options) decode unchanged."""
    data = base64.b64encode(b"x").decode()
    kwargs = {
        "mail_id": "m-1",
        "charset": "iso-8859-1",
        "headers": {"Message-ID": "<t@h>", "Sender": "b@example.org"},
        "attachments": [["", data, "image/png", {"inline": True, "content_id": "<i@h>"}]],
    }
    parked = Parked("m-1", ["ada@example.com"], kwargs, 1_800_000_000.0)
    assert Parked.decode(parked.encode(), "m-1").kwargs == kwargs
    three = {"mail_id": "m-2", "attachments": [["a.txt", data, "text/plain"]]}
    written = Parked("m-2", ["ada@example.com"], three, 1.0).encode()
    assert Parked.decode(written, "m-2").kwargs == three
    args = Parked.decode(written, "m-2").args
    check_arguments(args, {k: v for k, v in three.items() if k != "mail_id"})


def test_header_classes_are_made_once_and_write_what_the_standard_registry_writes() -> None:
    made = MadeOnceRegistry()
    assert made["To"] is made["to"]
    standard = HeaderRegistry()
    for name, value in [("To", "Ada <ada@example.com>"), ("Subject", "Grüße"), ("Date", "x")]:
        assert str(made(name, value)) == str(standard(name, value))
        assert [type(d) for d in made(name, value).defects] == [
            type(d) for d in standard(name, value).defects
        ]
    made.map_to_type("subject", standard["to"].__mro__[1])
    assert made["Subject"].__mro__[1] is standard["to"].__mro__[1]
