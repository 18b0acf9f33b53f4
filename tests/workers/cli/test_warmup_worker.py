"""A warm-up plan in a real worker (Redis limiter, aiosmtpd server): on a one-mail plan the
first newsletter is sent, the next two are deferred (reason ``warmup``) and parked in the
schedule for the plan's day 2, in the order they came, not dropped; ``mailguard warmup`` shows
day 1, its allowance used and two waiting. Day 2 itself is the guard-level test's
(``tests/guard/test_warmup_guard.py``, the limiter's clock moved): a Redis limiter's clock is
the server's, which a test cannot move, and the day's length is no setting."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from mailer.records.warmup import DAY
from mailer.settings import Settings
from tests.waiting import poll
from tests.workers.conftest import StackFactory
from workers.cli import main
from workers.waiting.parking import schedule_for

NEWS = "news@example.org"


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_over_the_days_allowance_mails_are_parked_for_day_two_in_order(
    stack: StackFactory,
) -> None:
    s = stack(
        MAILGUARD_POLICY="100/1s",
        MAILGUARD_SENDER=f"News <{NEWS}>",
        MAILGUARD_KIND_NEWSLETTER_MAX_WAIT="3d",
        MAILGUARD_WARMUP="example.org: 1, 10",
        concurrency=1,
    )
    first = s.app.send_task(
        "mailguard.send_mail",
        args=["r0@example.com"],
        kwargs={"kind": "newsletter", "subject": "s", "body": "b"},
    )
    assert first.get(timeout=30)["status"] == "sent"
    waiting = [
        s.app.send_task(
            "mailguard.send_mail",
            args=[f"r{n}@example.com"],
            kwargs={"kind": "newsletter", "subject": "s", "body": "b"},
        )
        for n in (1, 2)
    ]
    schedule = schedule_for(Settings.from_env(s.env))
    for result in waiting:
        poll(lambda r=result: schedule.payload(r.id) is not None, 30, "a mail to be parked")
        assert result.state == "DEFERRED" and result.info["reason"] == "warmup", result.info
    dues = {m: d for m, d, _ in schedule.scan()}
    due1, due2 = dues[waiting[0].id], dues[waiting[1].id]
    day_two = first.result["decided_at"] + DAY  # the plan's day 1 began at the first mail
    assert day_two - 5 < due1 < due2 < day_two + 5, (day_two, due1, due2)  # in order
    assert [d.rcpt_tos for d in s.smtp.delivered] == [("r0@example.com",)]
    shown = CliRunner().invoke(main, ["warmup"], env=s.env)
    assert shown.exit_code == 0, shown.output
    row = next(line.split() for line in shown.output.splitlines() if "example.org" in line)
    assert row[:7] == ["example.org", "1,", "10", "1", "1", "1", "2"], shown.output
