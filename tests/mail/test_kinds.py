"""Kinds of mail: templates, sandboxing, max waits, the registry and its environment variables."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailer.durations import parse_duration
from mailer.errors import InvalidMessage, UnknownKind
from mailer.mail.kinds import Kind, Kinds, render


def test_defaults_hold_default_code_and_notice() -> None:
    """The built-in registry has exactly the three documented kinds and waits."""
    kinds = Kinds.defaults()
    assert sorted(kinds) == ["code", "default", "notice"]
    assert kinds["default"].max_wait == 86400.0
    assert kinds["code"].max_wait == 300.0
    assert kinds["notice"].max_wait == 86400.0


def test_code_kind_renders_the_code() -> None:
    """The ``code`` kind fills in its subject and body from the context."""
    assert render(Kinds.defaults()["code"], None, None, None, {"code": "482913"}) == (
        "Your code",
        "Your code is 482913",
        None,
    )


def test_missing_variable_raises_naming_it() -> None:
    """A template variable absent from the context raises InvalidMessage naming the variable."""
    with pytest.raises(InvalidMessage, match="body template needs variable 'code'"):
        render(Kinds.defaults()["code"], None, None, None, {})


def test_all_missing_variables_are_named() -> None:
    """Every missing variable is listed, in order, in one message."""
    kind = Kind("welcome", subject="Hi {{ name }}", body="{{ b }} {{ a }}")
    with pytest.raises(InvalidMessage, match="variables 'a', 'b'"):
        render(kind, None, None, None, {"name": "Ada"})


def test_missing_attribute_raises_invalid_message() -> None:
    """An attribute missing at render time is InvalidMessage, not an empty string."""
    kind = Kind("welcome", subject="Hi {{ user.name }}", body="b")
    with pytest.raises(InvalidMessage, match="has no attribute 'name'"):
        render(kind, None, None, None, {"user": {}})


def test_default_kind_has_neutral_text_and_caller_text_wins() -> None:
    """``default`` fills a missing subject or body with neutral text; given text is used as is."""
    default = Kinds.defaults()["default"]
    assert render(default, None, None, None, {}) == (
        "A message for you",
        "You have a new message.",
        None,
    )
    assert render(default, "S", None, None, {}) == ("S", "You have a new message.", None)
    assert render(default, "S", "B", None, {}) == ("S", "B", None)
    notice = Kinds.defaults()["notice"]
    with pytest.raises(InvalidMessage, match="subject"):
        render(notice, None, "body", None, {})


def test_caller_text_is_never_rendered() -> None:
    """Text given by the caller is used verbatim, so template syntax in it is not executed."""
    kind = Kind("welcome", subject="Hi {{ name }}", body="Hello {{ name }}", html="<b>x</b>")
    subject, body, html = render(
        kind, "{{ name }}", "{% for x in y %}", "<i>{{ 7*7 }}</i>", {"name": "Ada"}
    )
    assert (subject, body, html) == ("{{ name }}", "{% for x in y %}", "<i>{{ 7*7 }}</i>")


def test_html_is_escaped_and_text_is_not() -> None:
    """Context values are HTML-escaped in the HTML template only."""
    kind = Kind(
        "welcome", subject="Hi {{ name }}", body="Hello {{ name }}", html="<b>{{ name }}</b>"
    )
    subject, body, html = render(kind, None, None, None, {"name": "<Ada & Bob>"})
    assert subject == "Hi <Ada & Bob>"
    assert body == "Hello <Ada & Bob>"
    assert html == "<b>&lt;Ada &amp; Bob&gt;</b>"


def test_sandbox_blocks_python_internals() -> None:
    """A template reaching for dunder attributes raises InvalidMessage instead of running."""
    kind = Kind("evil", subject="{{ x.__class__.__mro__ }}", body="b")
    with pytest.raises(InvalidMessage, match="sandbox forbids"):
        render(kind, None, None, None, {"x": 1})


def test_failing_template_is_invalid_message_without_values() -> None:
    """An exception inside a template becomes InvalidMessage naming only its type."""
    kind = Kind("broken", subject="{{ n / 0 }}", body="b")
    with pytest.raises(InvalidMessage, match="failed with ZeroDivisionError") as info:
        render(kind, None, None, None, {"n": 12345})
    assert "12345" not in str(info.value)


def test_bad_template_fails_at_configuration_time() -> None:
    """A template that does not compile raises ValueError when the Kind is made."""
    with pytest.raises(ValueError, match="body template does not compile"):
        Kind("broken", body="{% if %}")


@pytest.mark.parametrize("name", ["", "Code", "1st", "with-dash", "x" * 65])
def test_bad_kind_names_are_refused(name: str) -> None:
    """Kind names are lower-case identifiers of 1 to 64 characters."""
    with pytest.raises(ValueError, match="bad kind name"):
        Kind(name)


@pytest.mark.parametrize("max_wait", [-1, float("inf"), float("nan"), True])
def test_bad_max_waits_are_refused(max_wait: float) -> None:
    """``max_wait`` must be a finite, non-negative number of seconds."""
    with pytest.raises(ValueError, match="max_wait"):
        Kind("x", max_wait=max_wait)


def test_unknown_kind_is_invalid_message_and_key_error() -> None:
    """Looking up an unknown kind names it and the known ones; ``in`` and ``get`` still work."""
    kinds = Kinds.defaults()
    with pytest.raises(InvalidMessage, match=r"unknown kind 'x'; known: code, default, notice"):
        kinds["x"]
    assert isinstance(UnknownKind("x"), KeyError)
    assert "x" not in kinds
    assert kinds.get("x") is None


def test_with_kind_adds_or_replaces_without_changing_the_original() -> None:
    """``with_kind`` returns a new registry; the original keeps its kinds."""
    kinds = Kinds.defaults()
    faster = kinds.with_kind(Kind("code", subject="Code", body="{{ code }}", max_wait=60))
    added = kinds.with_kind(Kind("digest", max_wait=3600))
    assert faster["code"].max_wait == 60.0
    assert kinds["code"].max_wait == 300.0
    assert "digest" in added
    assert "digest" not in kinds


def test_from_env_overrides_and_adds_kinds() -> None:
    """``MAILGUARD_KIND_<NAME>_*`` variables change built-ins and add new kinds."""
    kinds = Kinds.from_env(
        {
            "MAILGUARD_KIND_CODE_MAX_WAIT": "10m",
            "MAILGUARD_KIND_PASSWORD_RESET_MAX_WAIT": "1h",
            "MAILGUARD_KIND_PASSWORD_RESET_SUBJECT": "Reset your password",
            "MAILGUARD_KIND_PASSWORD_RESET_BODY": "Open {{ link }}",
            "MAILGUARD_KIND_PASSWORD_RESET_HTML": "<a href='{{ link }}'>reset</a>",
            "PATH": "/usr/bin",
        }
    )
    assert kinds["code"].max_wait == 600.0
    assert kinds["code"].body == "Your code is {{ code }}"
    reset = kinds["password_reset"]
    assert reset.max_wait == 3600.0
    assert render(reset, None, None, None, {"link": "https://x/?a=1&b=2"}) == (
        "Reset your password",
        "Open https://x/?a=1&b=2",
        "<a href='https://x/?a=1&amp;b=2'>reset</a>",
    )


def test_from_env_new_kind_waits_a_day_by_default() -> None:
    """A kind added with only a subject waits up to 24 h."""
    kinds = Kinds.from_env({"MAILGUARD_KIND_DIGEST_SUBJECT": "Your digest"})
    assert kinds["digest"].max_wait == 86400.0


def test_from_env_empty_value_removes_a_template() -> None:
    """An empty template variable removes the built-in template."""
    kinds = Kinds.from_env({"MAILGUARD_KIND_CODE_SUBJECT": ""})
    assert kinds["code"].subject is None


@pytest.mark.parametrize(
    ("environ", "match"),
    [
        ({"MAILGUARD_KIND_CODE_MAX_WAIT": "soon"}, "MAILGUARD_KIND_CODE_MAX_WAIT: bad duration"),
        ({"MAILGUARD_KIND_CODE_MAXWAIT": "5m"}, "MAILGUARD_KIND_CODE_MAXWAIT: unknown setting"),
        ({"MAILGUARD_KIND_9X_SUBJECT": "x"}, "MAILGUARD_KIND_9X_.*bad kind name"),
        ({"MAILGUARD_KIND_CODE_BODY": "{{ unclosed"}, "MAILGUARD_KIND_CODE_.*does not compile"),
    ],
)
def test_from_env_bad_settings_raise_naming_the_variable(
    environ: dict[str, str], match: str
) -> None:
    """Bad or unknown ``MAILGUARD_KIND_*`` variables raise ValueError naming the variable."""
    with pytest.raises(ValueError, match=match):
        Kinds.from_env(environ)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("300", 300.0),
        ("5m", 300.0),
        ("24h", 86400.0),
        ("1d", 86400.0),
        ("500ms", 0.5),
        ("1.5s", 1.5),
        (" 2 H ", 7200.0),
        ("0", 0.0),
        (".25s", 0.25),
    ],
)
def test_parse_duration_reads_units(text: str, seconds: float) -> None:
    """Durations with and without units come out in seconds."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "-5m", "5 minutes", "1h30m", "5w", "m", "nan", "1e3"])
def test_parse_duration_refuses_bad_text(text: str) -> None:
    """Negative, unitless-garbage or compound durations raise ValueError."""
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration(text)


@given(st.text(max_size=30))
def test_parse_duration_never_crashes(text: str) -> None:
    """Any text is either a finite non-negative duration or a ValueError."""
    try:
        seconds = parse_duration(text)
    except ValueError:
        return
    assert seconds >= 0
    assert seconds < float("inf")


def test_share_defaults_to_one_and_is_read_from_the_environment() -> None:
    """Every kind fills whole tiers unless MAILGUARD_KIND_<NAME>_SHARE says a part of them."""
    kinds = Kinds.from_env({"MAILGUARD_KIND_BULK_SHARE": "0.5"})
    assert kinds["code"].share == 1.0
    assert kinds["bulk"].share == 0.5
    assert Kind("digest", share=0.8).share == 0.8


@pytest.mark.parametrize("value", ["0", "1.5", "-0.1", "nan", "half"])
def test_bad_share_is_refused_naming_the_variable(value: str) -> None:
    """A share outside (0, 1], or not a number, is refused in one line naming the variable."""
    with pytest.raises(ValueError, match=r"MAILGUARD_KIND_BULK_.*share must be a number in"):
        Kinds.from_env({"MAILGUARD_KIND_BULK_SHARE": value})


def test_kind_share_must_be_a_fraction() -> None:
    """Kind(share=...) refuses 0, more than 1 and booleans."""
    for bad in (0, 1.01, True):
        with pytest.raises(ValueError, match="share must be a number in"):
            Kind("bulk", share=bad)
