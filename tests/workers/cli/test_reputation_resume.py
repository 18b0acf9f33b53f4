"""``mailguard reputation resume`` releases the mail that waited on the pause at once: a real
worker with a bulk kind, its sender paused (bounces over the threshold), a newsletter parked
for the pause's recheck (5 min); after the resume it is sent within the promoter's poll."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from devservers.celery_worker import client_app
from mailer.factory import build_reputation
from mailer.records.schedule import MemorySchedule
from mailer.settings import Settings
from mailer.steps import Progress
from tests.waiting import poll
from tests.workers.conftest import StackFactory
from workers.cli import main
from workers.waiting.parking import schedule_for
from workers.waiting.payload import Parked
from workers.waiting.reputation_release import release_paused

NEWS = "news@example.org"


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_resume_sends_the_paused_newsletter_now(stack: StackFactory) -> None:
    """Paused: the newsletter is deferred (reputation) and parked ~5 min ahead. Resumed: the
    command says one mail was released and the worker sends it within seconds."""
    s = stack(
        MAILGUARD_POLICY="100/1s",
        MAILGUARD_SENDER=f"News <{NEWS}>",
        MAILGUARD_KIND_NEWSLETTER_UNSUBSCRIBE="1",
        MAILGUARD_UNSUBSCRIBE_URL="https://example.org/unsubscribe",
        MAILGUARD_REPUTATION="bounce 10%",
        MAILGUARD_REPUTATION_MIN="5",
        concurrency=1,
    )
    settings = Settings.from_env(s.env)
    reputation = build_reputation(settings)
    assert reputation is not None
    for _ in range(5):
        reputation.count_bounce(NEWS, sent=True)
    assert reputation.check(NEWS).paused
    app = client_app(s.env)
    try:
        waiting = app.send_task(
            "mailguard.send_mail",
            args=["reader@example.com"],
            kwargs={"kind": "newsletter", "subject": "s", "body": "b"},
        )
        schedule = schedule_for(settings)
        poll(lambda: schedule.payload(waiting.id) is not None, 30, "the newsletter to be parked")
        assert waiting.state == "DEFERRED" and waiting.info["reason"] == "reputation"
        due = next(d for m, d, _ in schedule.scan() if m == waiting.id)
        assert due is not None and due > time.time() + 60  # the recheck's, not the poll's
        resumed = CliRunner().invoke(main, ["reputation", "resume", NEWS, "--by", "ops"], env=s.env)
        assert resumed.exit_code == 0, resumed.output
        assert "1 paused mail released: due now" in resumed.output
        assert waiting.get(timeout=30)["status"] == "sent"
        assert [d.rcpt_tos for d in s.smtp.delivered] == [("reader@example.com",)]
    finally:
        app.close()


def test_only_the_senders_bulk_mails_holding_no_slot_are_released() -> None:
    """Of five parked mails, only the paused sender's newsletter that holds no slot is made due
    now (its payload's due too); another sender's, a code mail, a newsletter booked for a
    slot ahead and one due within ``SOON`` stay as they were."""
    settings = Settings.from_env(
        {"MAILGUARD_SENDER": NEWS, "MAILGUARD_KIND_NEWSLETTER_UNSUBSCRIBE": "1"}
    )
    schedule = MemorySchedule()
    now = time.time()
    later = now + 300

    def parked(mail_id: str, due: float, slot: float = 0.0, **kwargs: str) -> None:
        entry = Parked("t-" + mail_id, ["r@example.com"], {"mail_id": mail_id, **kwargs}, due,
                       progress=Progress(due=slot))  # fmt: skip
        schedule.park(mail_id, due, entry.encode())

    parked("paused", later, kind="newsletter")
    parked("other", later, kind="newsletter", from_email="Other <other@example.org>")
    parked("code", later, kind="code")
    parked("booked", later, slot=later, kind="newsletter")
    parked("soon", now + 1, kind="newsletter")
    assert release_paused(settings, schedule, f"News <{NEWS.upper()}>") == 1
    dues = {m: d for m, d, _ in schedule.scan()}
    assert dues["paused"] is not None and dues["paused"] <= time.time()
    assert Parked.decode(schedule.payload("paused"), "paused").due == pytest.approx(
        dues["paused"], abs=0.01
    )
    assert {m: dues[m] for m in ("other", "code", "booked")} == dict.fromkeys(
        ("other", "code", "booked"), pytest.approx(later, abs=0.01)
    )
    assert dues["soon"] == pytest.approx(now + 1, abs=0.01)
