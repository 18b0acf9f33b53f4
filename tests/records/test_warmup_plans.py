"""Warm-up plans as written in ``MAILGUARD_WARMUP`` and the transactional flag of a kind: the
built-in ramps with their published numbers, custom tables, and one clear line for anything
else."""

from __future__ import annotations

import pytest

from mailer.records.warmup import BUILT_IN, parse_plan, parse_plans
from mailer.records.warmup.plans import plan_for
from mailer.settings import Settings


def test_the_built_in_plans_are_the_published_ramps() -> None:
    """SendGrid: its hourly schedule times 24 (20 an hour on day 1, 1000 on day 13, 42 days);
    SparkPost: week 1 per IP."""
    sendgrid = BUILT_IN["sendgrid"]
    assert (sendgrid[0], sendgrid[1], sendgrid[12], len(sendgrid)) == (480, 672, 24_000, 42)
    assert sendgrid[-1] == 19_601_056 * 24
    assert BUILT_IN["sparkpost"] == (200, 500, 1_000, 2_000, 5_000, 10_000, 20_000)
    plan = parse_plan(" SendGrid ")
    assert (plan.allowance(1), plan.allowance(42), plan.allowance(43), str(plan)) == (
        480,
        470_425_344,
        None,
        "sendgrid",
    )


def test_a_setting_names_senders_and_domains() -> None:
    """An address's own plan first, else its domain's; the setting reads them."""
    plans = parse_plans("Orders@Example.org: sendgrid; example.org: 50, 100, 1_000")
    assert plans["example.org"].allowances == (50, 100, 1000)
    assert str(plans["example.org"]) == "50, 100, 1000"
    found = plan_for(plans, "orders@example.org")
    assert found is not None and found[0] == "orders@example.org"
    found = plan_for(plans, "news@example.org")
    assert found is not None and found[0] == "example.org"
    assert plan_for(plans, "news@other.org") is None
    settings = Settings.from_env({"MAILGUARD_WARMUP": "example.org: 5, 10"})
    assert settings.warmup is not None and settings.warmup["example.org"].allowances == (5, 10)
    assert Settings.from_env({}).warmup is None
    assert Settings.from_env({"MAILGUARD_WARMUP_IDLE": "14d"}).warmup_idle == 14 * 86_400


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("example.org", "is not '<address or domain>: <plan>'"),
        ("example.org: mailgun", "is not a plan"),
        ("example.org: 10, 0", "is not a plan"),
        ("example.org: 10, ten", "is not a plan"),
        ("a.org: 1; A.org: 2", "has two warm-up plans"),
        (" ; ", "no '<address or domain>: <plan>' entry"),
        ("@example.org: 5", "is not '<address or domain>: <plan>'"),
    ],
)
def test_a_bad_plan_is_one_line_naming_the_variable(text: str, says: str) -> None:
    with pytest.raises(ValueError, match="MAILGUARD_WARMUP") as raised:
        Settings.from_env({"MAILGUARD_WARMUP": text})
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_an_idle_span_out_of_bounds_is_refused() -> None:
    with pytest.raises(ValueError, match="MAILGUARD_WARMUP_IDLE must be 1d-365d"):
        Settings.from_env({"MAILGUARD_WARMUP_IDLE": "1h"})


def test_a_kind_is_marked_transactional_by_a_setting() -> None:
    """``code`` is transactional by default; ``_TRANSACTIONAL=1`` marks another, ``0`` unmarks;
    a bad value is one line."""
    kinds = Settings.from_env({"MAILGUARD_KIND_RECEIPT_TRANSACTIONAL": "1"}).kinds
    assert kinds["receipt"].transactional and kinds["code"].transactional
    assert not kinds["default"].transactional
    off = Settings.from_env({"MAILGUARD_KIND_CODE_TRANSACTIONAL": "0"}).kinds
    assert not off["code"].transactional
    with pytest.raises(ValueError, match="MAILGUARD_KIND_CODE_TRANSACTIONAL"):
        Settings.from_env({"MAILGUARD_KIND_CODE_TRANSACTIONAL": "maybe"})
