"""Argument bounds (``mailer.mail.arguments``) and sealed progress (``mailer.mail.seal``),
without Celery."""

from __future__ import annotations

from typing import Any

import pytest

from mailer.mail.arguments import MAX_DEPTH, InvalidArguments, check_arguments
from mailer.mail.seal import seal, unseal
from mailer.steps import Progress


def nested(depth: int) -> dict[str, Any]:
    """A context whose innermost dict sits ``depth`` levels below the context itself."""
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"x": value}
    return value


def test_a_plain_call_comes_back_as_keywords() -> None:
    """Positional to/subject/body and keyword options become one dict of keywords."""
    call = check_arguments(["ada@example.com", "Hi", "Hello"], {"kind": "code", "mail_id": "m-1"})
    assert call == {
        "to": "ada@example.com",
        "subject": "Hi",
        "body": "Hello",
        "kind": "code",
        "mail_id": "m-1",
    }


@pytest.mark.parametrize(
    ("args", "kwargs", "names"),
    [
        ([], {}, "to must be text"),
        ([42], {}, "to must be text, got int"),
        (["a@example.com\r\nBcc: x@example.com"], {}, "to must be one line"),
        (["a@example.com", "x" * 999], {}, "subject has 999 characters"),
        (["a@example.com", "\udc80"], {}, "not valid Unicode"),
        (["a@example.com"], {"body": "ok \ud800"}, "not valid Unicode"),
        (["a@example.com"], {"kind": "Bad Kind"}, "kind must be"),
        (["a@example.com"], {"mail_id": "{slot}"}, "mail_id must be"),
        (["a@example.com"], {"mail_id": "x" * 129}, "mail_id must be"),
        (["a@example.com"], {"mail_id": 7}, "mail_id must be"),
        (["a@example.com"], {"context": [1, 2]}, "context must be a dict"),
        (["a@example.com"], {"context": {"n": 2**64}}, "integer out of range"),
        (["a@example.com"], {"context": {"n": float("inf")}}, "not a finite number"),
        (["a@example.com"], {"context": {1: "x"}}, "keys must be str"),
        (["a@example.com"], {"context": {"when": object()}}, "cannot travel as JSON"),
        (["a@example.com"], {"context": nested(MAX_DEPTH + 1)}, "nested deeper than 32"),
        (["a@example.com"], {"context": {"l": list(range(10_001))}}, "more than 10000 values"),
        (["a@example.com"], {"headers": {"X-A": 1}}, "headers must map str to str"),
        (["a@example.com"], {"headers": {f"X-{n}": "v" for n in range(51)}}, "at most 50"),
        (["a@example.com"], {"reply_to": "x"}, r"send_mail: reply_to: "),
        (["a@example.com"], {"reply_to": ["x"]}, r"send_mail: reply_to\[0\]: "),
        (["ada@"], {}, "send_mail: to: domain part .* give an address such as"),
        (["a@example.com"], {"bcc_list": "x"}, "unexpected argument 'bcc_list'"),
        (["a@example.com"], {"tenant": ""}, "tenant must be a str of 1 to 64"),
        (["a@example.com"], {"tenant": "x" * 65}, "tenant must be a str of 1 to 64"),
        (["a@example.com"], {"tenant": "ac\nme"}, "must not contain control characters"),
        (["a@example.com"], {"tenant": 7}, "tenant must be a str"),
        (["a@example.com"], {"_progress": "x"}, "unexpected argument '_progress'"),
        (["a@example.com", "s", "b", "extra"], {}, "at most 3 positional"),
        (["a@example.com"], {"to": "b@example.com"}, "to given twice"),
    ],
)
def test_bad_calls_are_refused_with_one_line_naming_the_part(
    args: list[Any], kwargs: dict[str, Any], names: str
) -> None:
    """Each bad call raises InvalidArguments (a ValueError) whose one line names what is wrong."""
    with pytest.raises(InvalidArguments, match=names.replace("(", r"\(")) as raised:
        check_arguments(args, kwargs)
    assert "\n" not in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_nesting_up_to_the_limit_and_big_messages_up_to_the_cap_pass() -> None:
    """A context exactly MAX_DEPTH deep passes; the size cap counts the whole call as JSON."""
    check_arguments(["a@example.com"], {"context": nested(MAX_DEPTH)})
    body = "é" * 600
    check_arguments(["a@example.com", "s", body], None, max_message_bytes=2048)
    with pytest.raises(InvalidArguments, match="MAILGUARD_MAX_MESSAGE_BYTES"):
        check_arguments(["a@example.com", "s", body * 2], None, max_message_bytes=2048)


def test_a_refusal_never_echoes_the_address() -> None:
    """The one-line error names the argument, never the recipient's address."""
    with pytest.raises(InvalidArguments) as raised:
        check_arguments(["ada@example.com\n"], {})
    assert "ada" not in str(raised.value)


def test_private_arguments_pass_only_when_named() -> None:
    """A private keyword is accepted (unchecked here) only when the caller lists it."""
    call = check_arguments(["a@example.com"], {"_progress": "tok"}, private=("_progress",))
    assert call["_progress"] == "tok"


def test_sealed_progress_round_trips_for_its_mail_only() -> None:
    """unseal gives back what seal made, for the same mail id and secret; None otherwise."""
    progress = Progress(attempts=3, send_failures=1, limiter_failures=2, deferrals=4)
    token = seal(progress, "m1", "secret")
    assert unseal(token, "m1", "secret") == progress
    assert unseal(token, "m2", "secret") is None, "another mail's seal"
    assert unseal(token, "m1", "other") is None, "another secret"
    assert unseal(seal(progress, "m1", None), "m1", None) == progress, "no secret: fixed key"
    body, tag = token.split(".")
    assert unseal(f"{body}x.{tag}", "m1", "secret") is None, "tampered"


@pytest.mark.parametrize(
    "junk", [None, 7, "", "a.b", "a.b.c", "!!!.???", "x" * 600, {"attempts": 1}, "\udc80.x"]
)
def test_unseal_answers_none_for_junk(junk: object) -> None:
    """Anything mailguard did not seal is None, never an exception."""
    assert unseal(junk, "m1", "secret") is None


def test_progress_from_junk_starts_from_zero() -> None:
    """Malformed counters (wrong types, huge floats, negatives) give zero progress or clamp;
    a progress without a turn has an unknown one (-1: nothing checked)."""
    zero = Progress(turn=-1)
    assert Progress.from_dict({"attempts": "x"}) == zero
    assert Progress.from_dict({"attempts": float("inf")}) == zero
    assert Progress.from_dict({"attempts": -5}) == zero


def test_the_receipt_check_bounds_addresses_without_parsing_them() -> None:
    """``addresses=False`` (a worker's receipt check, before the guard parses them): a bad
    address passes, a malformed shape does not."""
    call = {"subject": "s", "body": "b", "cc": ["not an address"]}
    assert check_arguments(["nobody"], call, addresses=False)["to"] == "nobody"
    with pytest.raises(InvalidArguments, match="to"):
        check_arguments(["nobody"], call)
    with pytest.raises(InvalidArguments, match=r"cc\[0\] must be one line"):
        check_arguments(["nobody"], {"cc": ["a\nb"]}, addresses=False)
