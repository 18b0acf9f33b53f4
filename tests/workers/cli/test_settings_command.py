"""``mailguard settings``: every variable with its value and default, secrets masked, then the
settings read as a worker reads them (the command in-process, as a shell gives it MAILGUARD_*)."""

from __future__ import annotations

import json

from mailer.settings import KNOWN
from tests.workers.cli.test_cli import invoke, one_line_error

ENV = {
    "MAILGUARD_SECRET": "s3cr3t-value",
    "MAILGUARD_BROKER_URL": "redis://:brokerpw@broker.example:6379/1",
    "MAILGUARD_SMTP_URL": "smtps://mailer:smtppw@relay.example:465",
    "MAILGUARD_LIMITER_URL": "redis://limiter.example:6379/0?password=querypw",
    "MAILGUARD_POLICY": "1/2m, 4/1h",
    "MAILGUARD_KIND_NEWSLETTER_UNSUBSCRIBE": "1",
    "MAILGUARD_UNSUBSCRIBE_URL": "https://example.org/unsubscribe",
}


def test_every_variable_is_listed_with_its_value_and_default_secrets_masked() -> None:
    """Every variable a worker reads has a row; set ones show their value, passwords and the
    secret masked; unset ones their documented default; exit 0."""
    done = invoke(["settings", "--json"], ENV)
    assert done.exit_code == 0, done.output
    rows = {row["variable"]: row for row in json.loads(done.stdout)}
    assert set(rows) == KNOWN | {"MAILGUARD_KIND_NEWSLETTER_UNSUBSCRIBE"}
    for secret in ("s3cr3t-value", "brokerpw", "smtppw", "querypw"):
        assert secret not in done.stdout
    assert rows["MAILGUARD_SECRET"]["value"] == "***"
    assert rows["MAILGUARD_BROKER_URL"]["value"] == "redis://:***@broker.example:6379/1"
    assert rows["MAILGUARD_SMTP_URL"]["value"] == "smtps://mailer:***@relay.example:465"
    assert rows["MAILGUARD_LIMITER_URL"]["value"].endswith("?password=***")
    assert rows["MAILGUARD_POLICY"] == {
        "variable": "MAILGUARD_POLICY",
        "set": True,
        "value": "1/2m, 4/1h",
        "default": "1/60s, 5/1h, 10/24h",
    }
    assert rows["MAILGUARD_QUEUE"] == {
        "variable": "MAILGUARD_QUEUE",
        "set": False,
        "value": None,
        "default": "mail",
    }
    assert all(row["default"] for row in rows.values())


def test_the_table_is_whole_and_masked() -> None:
    """The table (not a terminal: whole): one line a variable, no secret."""
    done = invoke(["settings"], ENV)
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    for name in KNOWN:
        assert any(line.split()[:1] == [name] for line in lines), name
    assert "s3cr3t" not in done.stdout and "brokerpw" not in done.stdout
    queue = next(line for line in lines if line.split()[:1] == ["MAILGUARD_QUEUE"])
    assert queue.split() == ["MAILGUARD_QUEUE", "(not", "set)", "mail"]


def test_a_refused_value_is_listed_then_named_exit_2() -> None:
    """A value a worker refuses: the rows are printed, then one line naming it, exit 2."""
    done = invoke(["settings"], {**ENV, "MAILGUARD_POLICY": "5/1s, 1/1s"})
    assert done.exit_code == 2
    assert "MAILGUARD_POLICY" in done.stdout
    assert "duplicate tier" in one_line_error(done.stderr)
