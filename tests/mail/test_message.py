"""Building outgoing messages: Message-ID, MIME structure, header injection and size caps."""

from __future__ import annotations

import email
import email.policy
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailer.errors import InvalidMessage, MailguardError
from mailer.mail.message import (
    Mail,
    MessageLimits,
    build_message,
    check_mail,
    message_id,
    needs_build_to_check,
)


def _mail(**changes: Any) -> Mail:
    base = Mail(
        to="ada@example.com",
        subject="Hello",
        body="Hi Ada,\nhow are you?\n",
        mail_id="0b8e2a5c-6f1e-4c57-9d0c-2a4f7e1b9c33",
        sender="Mailguard <noreply@sender.example>",
    )
    return replace(base, **changes)


def test_plain_mail_is_a_single_text_part() -> None:
    """Without HTML the message is text/plain with the headers set from the mail."""
    message = build_message(_mail())
    assert message.get_content_type() == "text/plain"
    assert message["To"] == "ada@example.com"
    assert message["From"] == "Mailguard <noreply@sender.example>"
    assert message["Subject"] == "Hello"
    assert message.get_content() == "Hi Ada,\nhow are you?\n"


def test_html_makes_multipart_alternative_with_text_first() -> None:
    """With HTML the message is multipart/alternative: the text part, then the HTML part."""
    message = build_message(_mail(html="<p>Hi Ada</p>"))
    assert message.get_content_type() == "multipart/alternative"
    parts = [part.get_content_type() for part in message.iter_parts()]
    assert parts == ["text/plain", "text/html"]
    html_part = message.get_body(preferencelist=("html",))
    assert html_part is not None
    assert html_part.get_content() == "<p>Hi Ada</p>"  # as given: no newline added (Django's)


def test_message_id_is_derived_from_the_mail_id_and_sender_domain() -> None:
    """A UUID mail id becomes ``<uuid@sender-domain>`` unchanged."""
    message = build_message(_mail())
    assert message["Message-ID"] == "<0b8e2a5c-6f1e-4c57-9d0c-2a4f7e1b9c33@sender.example>"


def test_message_id_is_deterministic() -> None:
    """Building the same mail twice gives the same Message-ID."""
    assert build_message(_mail())["Message-ID"] == build_message(_mail())["Message-ID"]


def test_message_id_sanitises_odd_ids_without_collisions() -> None:
    """Unsafe characters are replaced, and a hash keeps similar ids apart."""
    first = message_id("a b>c", "x@example.com")
    second = message_id("a_b_c", "x@example.com")
    third = message_id("a/b c", "x@example.com")
    assert first.startswith("<a_b_c.") and first.endswith("@example.com>")
    assert second == "<a_b_c@example.com>"
    assert len({first, second, third}) == 3


def test_message_id_falls_back_without_a_sender_domain() -> None:
    """A sender without a usable domain gives the ``mailguard.invalid`` domain."""
    assert message_id("m1", "noreply") == "<m1@mailguard.invalid>"
    assert message_id("m1", "x@bad_domain!") == "<m1@mailguard.invalid>"


def test_message_id_uses_punycode_for_an_international_sender_domain() -> None:
    """A Unicode sender domain appears IDNA-encoded in the Message-ID."""
    assert message_id("m1", "noreply@Bücher.ch") == "<m1@xn--bcher-kva.ch>"


@pytest.mark.parametrize("mail_id", ["", "x" * 256, "a\r\nb"])
def test_bad_mail_ids_are_refused(mail_id: str) -> None:
    """Empty, too long or multi-line mail ids raise InvalidMessage."""
    with pytest.raises(InvalidMessage, match="mail_id"):
        build_message(_mail(mail_id=mail_id))


def test_date_comes_from_the_given_clock_reading() -> None:
    """``now`` in seconds since the epoch sets the Date header; without it there is none."""
    assert build_message(_mail(), now=1_700_000_000.0)["Date"] == (
        "Tue, 14 Nov 2023 22:13:20 +0000"
    )
    assert build_message(_mail())["Date"] is None


def test_extra_headers_are_added() -> None:
    """Extra headers such as List-Unsubscribe appear on the message."""
    message = build_message(
        _mail(headers={"List-Unsubscribe": "<https://example.com/u>", "X-Kind": "code"})
    )
    assert message["List-Unsubscribe"] == "<https://example.com/u>"
    assert message["X-Kind"] == "code"


def test_mail_copies_the_callers_headers() -> None:
    """Changing the caller's dict after building the Mail changes nothing."""
    headers = {"X-Kind": "code"}
    mail = _mail(headers=headers)
    headers["Bcc"] = "eve@example.com"
    assert dict(mail.headers) == {"X-Kind": "code"}


@pytest.mark.parametrize("name", ["Bcc", "cc", "TO", "From", "Content-Type"])
def test_reserved_headers_are_refused(name: str) -> None:
    """Headers that add recipients or that the builder sets cannot be given as extras."""
    with pytest.raises(InvalidMessage, match="set by mailguard"):
        build_message(_mail(headers={name: "eve@example.com"}))


@pytest.mark.parametrize("name", ["X Bad", "X:Bad", "", "Ünicode"])
def test_malformed_header_names_are_refused(name: str) -> None:
    """Header names must be printable ASCII without spaces or colons."""
    with pytest.raises(InvalidMessage, match="header names"):
        build_message(_mail(headers={name: "v"}))


@pytest.mark.parametrize("bad", ["\r", "\n", "\0", "\r\nBcc: eve@example.com"])
@pytest.mark.parametrize("field", ["subject", "sender", "to", "header"])
def test_control_characters_in_header_values_are_refused(field: str, bad: str) -> None:
    """CR, LF or NUL in any header value raises InvalidMessage naming the field, not the value."""
    content = "Secret code 1234"
    if field == "header":
        mail = _mail(headers={"X-Note": content + bad})
    else:
        mail = _mail(**{field: content + bad})
    with pytest.raises(InvalidMessage, match="forbidden control character") as info:
        build_message(mail)
    assert ("X-Note" if field == "header" else field) in str(info.value)
    assert "Secret" not in str(info.value)


def test_nul_in_body_is_refused() -> None:
    """A NUL character in the text or HTML body raises InvalidMessage."""
    with pytest.raises(InvalidMessage, match="body contains a NUL"):
        build_message(_mail(body="a\0b"))
    with pytest.raises(InvalidMessage, match="html contains a NUL"):
        build_message(_mail(html="a\0b"))


def test_subject_cap_is_998_characters_by_default() -> None:
    """A 998-character subject is fine; one more raises InvalidMessage."""
    assert build_message(_mail(subject="s" * 998))["Subject"] == "s" * 998
    with pytest.raises(InvalidMessage, match="subject is longer than 998"):
        build_message(_mail(subject="s" * 999))


def test_body_cap_counts_utf8_bytes() -> None:
    """The body cap is in UTF-8 bytes: 1 MiB by default, configurable."""
    build_message(_mail(body="a" * (1024 * 1024)))
    with pytest.raises(InvalidMessage, match="body is larger than 1048576 bytes"):
        build_message(_mail(body="a" * (1024 * 1024 + 1)))
    limits = MessageLimits(max_body_bytes=10)
    with pytest.raises(InvalidMessage, match="html is larger than 10 bytes"):
        build_message(_mail(body="ok", html="ü" * 6), limits=limits)


def test_header_count_is_capped() -> None:
    """More extra headers than ``max_headers`` raises InvalidMessage."""
    headers = {f"X-H{i}": "v" for i in range(3)}
    with pytest.raises(InvalidMessage, match="more than 2"):
        build_message(_mail(headers=headers), limits=MessageLimits(max_headers=2))


def test_non_string_fields_are_refused() -> None:
    """A body that is not a str raises InvalidMessage instead of a TypeError deep inside."""
    with pytest.raises(InvalidMessage, match="body must be a str"):
        build_message(_mail(body=b"bytes"))


def test_invalid_message_is_a_value_error_and_a_mailguard_error() -> None:
    """Callers may catch InvalidMessage as ValueError or as MailguardError."""
    with pytest.raises(ValueError) as info:
        build_message(_mail(subject="a\nb"))
    assert isinstance(info.value, MailguardError)


def test_international_message_survives_a_round_trip() -> None:
    """Unicode subject, recipient and body serialise with SMTPUTF8 and parse back unchanged."""
    message = build_message(_mail(to="jörg@bücher.ch", subject="Grüße", body="Schön\n"))
    raw = message.as_bytes(policy=email.policy.SMTPUTF8)
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert parsed["To"] == "jörg@bücher.ch"
    assert parsed["Subject"] == "Grüße"
    assert parsed.get_content().splitlines() == ["Schön"]


@given(st.text(max_size=200), st.text(max_size=200))
def test_any_subject_and_body_build_or_raise_invalid_message(subject: str, body: str) -> None:
    """Arbitrary subject and body text never crash the builder: it builds or says why not."""
    try:
        message = build_message(_mail(subject=subject, body=body))
    except InvalidMessage:
        breaks_line = any(len(f"a{c}a".splitlines()) > 1 for c in subject)
        assert breaks_line or "\0" in subject + body
    else:
        assert message["Message-ID"].startswith("<0b8e2a5c")


@given(
    st.text(max_size=60),
    st.text(max_size=60),
    st.text(max_size=60),
    st.sampled_from(["ada@example.com", "", " ", "a\nb@example.com", "Jörg <j@bücher.ch>"]),
    st.one_of(st.none(), st.text(max_size=30)),
)
def test_check_mail_agrees_with_building_when_no_build_is_needed_to_check(
    subject: str, body: str, mail_id: str, sender: str, html: str | None
) -> None:
    """Without extra headers, attachments or Reply-To, ``check_mail`` refuses exactly what
    ``build_message`` refuses, with the same message: the guard may check a mail that waits
    and build it only when it sends."""
    mail = _mail(subject=subject, body=body, mail_id=mail_id, sender=sender, html=html)
    assert not needs_build_to_check(mail)
    try:
        build_message(mail)
    except InvalidMessage as exc:
        with pytest.raises(InvalidMessage) as checked:
            check_mail(mail)
        assert str(checked.value) == str(exc)
    else:
        assert check_mail(mail) == ("ada@example.com",)


def test_only_headers_attachments_and_reply_to_need_a_build_to_check() -> None:
    """The header registry parses extra headers and Reply-To, attachments carry MIME types."""
    assert needs_build_to_check(_mail(headers={"X-Tag": "a"}))
    assert needs_build_to_check(_mail(reply_to=("ada@example.com",)))
    assert not needs_build_to_check(_mail(cc=("bob@example.com",), html="<p>hi</p>"))
