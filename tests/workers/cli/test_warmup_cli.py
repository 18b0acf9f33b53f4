"""``mailguard warmup`` on the workers' shared limiter (a real Redis): each plan's sender with
its day, allowance, mails used and waiting; refused in one line when plans are off or the
limiter is memory://."""

from __future__ import annotations

import json

from click.testing import CliRunner

from mailer.factory import build_warmup
from mailer.limits.limiter import Limiter
from mailer.settings import Settings
from workers.cli import main


def _env(redis_url: str, **extra: str) -> dict[str, str]:
    return {
        "MAILGUARD_SECRET": "test-secret",
        "MAILGUARD_LIMITER_URL": redis_url,
        "MAILGUARD_WARMUP": "news@example.org: sendgrid; example.org: 2, 4",
        **extra,
    }


def test_warmup_shows_day_allowance_used_and_waiting(redis_url: str) -> None:
    """Three mails of example.org on a 2, 4 plan (two counted, one waiting) and none of
    news@example.org: the table and the JSON say so."""
    env = _env(redis_url)
    settings = Settings.from_env(env)
    limiter = Limiter.from_url(settings.limiter_url, settings.policy, secret="test-secret")
    warmup = build_warmup(settings, limiter)
    assert warmup is not None
    taken = [warmup.take("ada@example.org", f"m{n}") for n in range(3)]
    assert [t is not None and t.admitted for t in taken] == [True, True, False]
    limiter.close()
    result = CliRunner().invoke(main, ["warmup"], env=env)
    assert result.exit_code == 0, result.output
    rows = {
        line.split()[0]: line.split() for line in result.output.splitlines() if "example" in line
    }
    assert rows["example.org"][1:7] == ["2,", "4", "1", "2", "2", "1"], result.output
    assert rows["news@example.org"][1:6] == ["sendgrid", "0", "(not", "started)", "480"]
    shown = CliRunner().invoke(main, ["warmup", "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    data = {row["sender"]: row for row in json.loads(shown.output)}
    assert {k: data["example.org"][k] for k in ("day", "allowance", "used", "waiting")} == {
        "day": 1,
        "allowance": 2,
        "used": 2,
        "waiting": 1,
    }
    assert data["news@example.org"]["plan"] == "sendgrid" and data["news@example.org"]["day"] == 0


def test_warmup_refuses_plans_off_and_a_memory_limiter(redis_url: str) -> None:
    """Plans off: exit 2, one line; a memory:// limiter: exit 1, one line."""
    off = CliRunner().invoke(main, ["warmup"], env=_env(redis_url, MAILGUARD_WARMUP="off"))
    assert off.exit_code == 2 and "MAILGUARD_WARMUP is off" in off.output
    memory = CliRunner().invoke(
        main, ["warmup"], env=_env(redis_url, MAILGUARD_LIMITER_URL="memory://")
    )
    assert memory.exit_code == 1 and "memory://" in memory.output
