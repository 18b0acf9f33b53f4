"""``mailguard transport status | resume`` on the workers' shared holds (a real Redis)."""

from __future__ import annotations

import json

import pytest

from mailer.records.holds import holds_from_url
from tests.workers.cli.test_cli import run

pytestmark = pytest.mark.redis


def test_status_shows_the_hold_and_resume_lifts_it_at_once(redis_url: str) -> None:
    """A stored transport hold: status names its cause and next probe (JSON too); resume
    lifts it (exit 0), a second resume says it was not held; then status says not held."""
    env = {
        "MAILGUARD_LIMITER_URL": redis_url,
        "MAILGUARD_SECRET": "s",
        "MAILGUARD_SMTP_URL": "memory://",
    }
    holds = holds_from_url(redis_url, secret="s")
    holds.transport.lift_all()
    holds.transport.start("535 5.7.8 Error: authentication failed: authentication failure")
    shown = run(["transport", "status"], env)
    assert shown.returncode == 0, shown.stderr
    assert "transport held since" in shown.stdout and "535 5.7.8" in shown.stdout
    report = json.loads(run(["transport", "status", "--json"], env).stdout)
    assert report["held"] is True and report["holds"][0]["cause"].startswith("535")
    resumed = run(["transport", "resume"], env)
    assert (resumed.returncode, resumed.stdout.strip()) == (0, "transport resumed")
    assert run(["transport", "resume"], env).stdout.strip() == "transport was not held"
    assert holds.transport.current() is None
    assert run(["transport", "status"], env).stdout.strip() == "transport not held"


def test_transport_refuses_a_memory_limiter(redis_url: str) -> None:
    """With memory:// holds (each worker's own) the command cannot see them: exit 1, one line."""
    done = run(["transport", "status"], {"MAILGUARD_SMTP_URL": "memory://"})
    assert done.returncode == 1 and "memory://" in done.stderr
