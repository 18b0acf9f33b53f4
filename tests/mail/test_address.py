"""Recipient addresses: validation, normalisation, limit keys and safe error messages."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mailer.errors import InvalidAddress, MailguardError
from mailer.mail import address
from mailer.mail.address import AddressRules, Recipient, limit_key, normalise_address


def test_surrounding_whitespace_is_stripped_and_domain_lower_cased() -> None:
    """Whitespace around the address goes and the domain is lower-cased; the local part stays."""
    recipient = normalise_address("  Ada.Lovelace@Example.COM \t")
    assert recipient.address == "Ada.Lovelace@example.com"


def test_international_domain_is_sent_as_punycode() -> None:
    """A Unicode domain with an ASCII local part is sent to its Punycode (IDNA) form."""
    recipient = normalise_address("ada@BÜCHER.ch")
    assert recipient == Recipient(
        address="ada@xn--bcher-kva.ch", limit_key="ada@xn--bcher-kva.ch", smtputf8=False
    )


def test_unicode_and_punycode_domains_share_a_limit_key() -> None:
    """The same domain written in Unicode or Punycode gives one limit key."""
    assert (
        normalise_address("ada@bücher.ch").limit_key
        == normalise_address("ada@xn--bcher-kva.ch").limit_key
    )


def test_international_local_part_needs_smtputf8() -> None:
    """A non-ASCII local part is kept in Unicode and flagged as needing SMTPUTF8."""
    recipient = normalise_address("jörg@bücher.ch")
    assert recipient.address == "jörg@bücher.ch"
    assert recipient.smtputf8 is True


def test_international_local_part_can_be_refused() -> None:
    """With ``allow_smtputf8=False`` a non-ASCII local part is invalid."""
    with pytest.raises(InvalidAddress):
        normalise_address("jörg@example.com", AddressRules(allow_smtputf8=False))


def test_plus_tag_is_stripped_from_the_limit_key_only() -> None:
    """``ada+1@x`` is sent as given but counted as ``ada@x``."""
    recipient = normalise_address("ada+1@example.com")
    assert recipient.address == "ada+1@example.com"
    assert recipient.limit_key == "ada@example.com"


def test_local_part_is_lower_cased_in_the_limit_key_only() -> None:
    """Case variants of one mailbox share a limit key but keep their spelling for delivery."""
    recipient = normalise_address("ADA@example.com")
    assert recipient.address == "ADA@example.com"
    assert recipient.limit_key == "ada@example.com"


def test_gmail_dots_and_googlemail_alias_collapse_in_the_limit_key() -> None:
    """Dots in a Gmail local part and the googlemail.com alias do not open a new budget."""
    keys = {
        normalise_address(a).limit_key
        for a in ("ada@gmail.com", "A.d.a@gmail.com", "a.da+x@googlemail.com", "ADA@GMAIL.COM")
    }
    assert keys == {"ada@gmail.com"}


def test_dots_are_kept_for_other_domains() -> None:
    """Outside the dotless domains a dot is part of the mailbox name."""
    assert normalise_address("a.da@example.com").limit_key == "a.da@example.com"


def test_rules_can_switch_every_key_folding_off() -> None:
    """With every option off the limit key is the normalised address itself."""
    rules = AddressRules(
        strip_tags=False, lowercase_local=False, dotless_domains=frozenset(), domain_aliases={}
    )
    recipient = normalise_address("A.da+1@googlemail.com", rules)
    assert recipient.limit_key == "A.da+1@googlemail.com"


def test_rules_accept_custom_separator_and_domains() -> None:
    """A custom tag separator and dotless domain set apply, case-insensitively."""
    rules = AddressRules(tag_separator="-", dotless_domains=frozenset({"Corp.Example"}))
    assert normalise_address("a.da-news@corp.example", rules).limit_key == "ada@corp.example"


def test_rules_copy_the_callers_alias_mapping() -> None:
    """Changing the dict given to AddressRules later does not change the rules."""
    aliases = {"old.example": "new.example"}
    rules = AddressRules(domain_aliases=aliases)
    aliases["new.example"] = "other.example"
    assert normalise_address("ada@old.example", rules).limit_key == "ada@new.example"
    assert normalise_address("ada@new.example", rules).limit_key == "ada@new.example"


def test_rules_refuse_a_bad_tag_separator() -> None:
    """A tag separator must be a single character that cannot split the address."""
    with pytest.raises(ValueError, match="tag_separator"):
        AddressRules(tag_separator="@")


def test_tag_only_local_part_is_kept_whole() -> None:
    """Stripping the tag never leaves an empty local part in the key."""
    assert normalise_address("+news@example.com").limit_key == "+news@example.com"


def test_limit_key_function_matches_recipient() -> None:
    """``limit_key`` applied to the parts gives the recipient's key."""
    assert limit_key("A.da+1", "googlemail.com") == "ada@gmail.com"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "address is empty"),
        ("   ", "address is empty"),
        ("ada.example.com", "no @-sign"),
        ("@example.com", "local part (before the @-sign) is empty"),
        ("ada@", "domain part (after the @-sign) is empty"),
        ("ada@example.com\r\nBcc: eve@example.com", "forbidden control character"),
        ("ada@example.com\n", "forbidden control character"),
        ("ada\0@example.com", "forbidden control character"),
        ("a" * 65 + "@example.com", "local part is longer than 64"),
        ("a@" + "b" * 250 + ".com", "longer than 254"),
        ("Ada <ada@example.com>", "display name"),
        ("ada@x.test", "special-use or reserved"),
    ],
)
def test_invalid_addresses_raise_with_a_reason(text: str, reason: str) -> None:
    """Each kind of bad address raises InvalidAddress whose message names the problem."""
    with pytest.raises(InvalidAddress, match=reason.replace("(", r"\(").replace(")", r"\)")):
        normalise_address(text)


def test_a_domain_without_a_dot_is_an_smtp_domain() -> None:
    """What SMTP needs, not what a public domain needs: ``localhost`` (Django's default
    senders) and a relay's own host names pass; an IP address without brackets does not."""
    assert normalise_address("root@localhost").address == "root@localhost"
    assert normalise_address("Ops@MailHost").limit_key == "ops@mailhost"
    with pytest.raises(InvalidAddress, match="not a host name"):
        normalise_address("ada@10.0.0.1")


def test_test_domains_can_be_allowed() -> None:
    """``allow_test_domains`` accepts the reserved ``.test`` domain for test suites."""
    assert normalise_address("ada@x.test", AddressRules(allow_test_domains=True)).address == (
        "ada@x.test"
    )


def test_invalid_address_is_a_value_error_and_a_mailguard_error() -> None:
    """Callers may catch InvalidAddress as ValueError or as MailguardError."""
    with pytest.raises(InvalidAddress) as info:
        normalise_address("nope")
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, MailguardError)


def test_non_string_input_is_refused() -> None:
    """Bytes or None are not addresses."""
    with pytest.raises(InvalidAddress, match="must be a str"):
        normalise_address(b"ada@example.com")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "secret.person@bad_domain.com",
        "secret.person@xn--zz.com",
        "secret<person>@example.com",
        "secret.person@exa mple.com",
        "secret..person@example.com",
    ],
)
def test_error_messages_never_contain_the_address(text: str) -> None:
    """Messages say what is wrong without repeating the address or its parts."""
    with pytest.raises(InvalidAddress) as info:
        normalise_address(text)
    message = str(info.value)
    assert "secret" not in message
    assert "example" not in message


_local = st.text(
    alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789.+-_'!#ü"),
    min_size=1,
    max_size=70,
)
_label = st.text(
    alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789-üß"),
    min_size=1,
    max_size=20,
)
_domain = st.lists(_label, min_size=2, max_size=4).map(".".join)
_addresses = st.builds(lambda local, domain: f"{local}@{domain}", _local, _domain)
_anything = st.one_of(st.text(max_size=300), _addresses)


@given(_anything)
@example("ada@example.com")
@example("A.da+1@GoogleMail.COM")
@example("ada@xn--bcher-kva.ch")
def test_any_text_normalises_or_raises_invalid_address(text: str) -> None:
    """Random text and random addresses never crash: they normalise or raise InvalidAddress."""
    try:
        recipient = normalise_address(text)
    except InvalidAddress as exc:
        assert text.strip() not in str(exc) or len(text.strip()) < 3
    else:
        assert "@" in recipient.address
        assert len(recipient.address.encode()) <= 254


@given(_anything)
def test_normalisation_is_idempotent(text: str) -> None:
    """Normalising the normalised address gives the same recipient and limit key."""
    try:
        recipient = normalise_address(text)
    except InvalidAddress:
        return
    assert normalise_address(recipient.address) == recipient


@given(
    _anything,
    st.sampled_from(["\r", "\n", "\0", "\r\n"]),
    st.integers(min_value=0, max_value=300),
)
def test_control_characters_are_always_refused(text: str, bad: str, where: int) -> None:
    """CR, LF or NUL anywhere in the input, even at the ends, is always invalid."""
    where = min(where, len(text))
    with pytest.raises(InvalidAddress, match="control character"):
        normalise_address(text[:where] + bad + text[where:])


_ATEXT = "abcXYZ019!#$%&'*+/=?^_`{|}~-"
_LDH = "abcXY09-"


@settings(max_examples=400, deadline=None)
@given(
    local=st.lists(st.text(_ATEXT, min_size=1, max_size=8), min_size=1, max_size=3),
    labels=st.lists(st.text(_LDH, min_size=1, max_size=8), min_size=1, max_size=3),
    suffix=st.sampled_from(["", ".com", ".test", ".localhost", ".onion", ".123", ".xn--4ca9at"]),
    test_domains=st.booleans(),
)
def test_a_plain_address_is_read_as_email_validator_reads_it(
    local: list[str], labels: list[str], suffix: str, test_domains: bool
) -> None:
    """The fast reading of plain ASCII addresses (``_plain``) answers what email-validator does,
    or leaves the address to it."""
    text = ".".join(local) + "@" + ".".join(labels) + suffix
    rules = AddressRules(allow_test_domains=test_domains)
    plain = address._plain(text, rules)
    try:
        slow = address._by_validator(text, rules)
    except InvalidAddress:
        assert plain is None
        return
    assert plain is None or plain == slow


def test_plain_addresses_take_the_fast_reading() -> None:
    rules = AddressRules()
    assert address._plain("Ada+news@Example.COM", rules) == (
        "Ada+news",
        "example.com",
        "Ada+news@example.com",
        False,
    )
    for other in ("ada@localhost", "ada@bücher.ch", "ada@xn--bcher-kva.ch", "ada@host.test"):
        assert address._plain(other, rules) is None
