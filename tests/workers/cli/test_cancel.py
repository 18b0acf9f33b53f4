"""``mailguard cancel`` and ``mailguard scheduled`` with a real worker, Redis and SMTP."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
import redis

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from mailer import Limiter, Policy
from mailer.records.schedule import RedisSchedule
from tests.waiting import poll
from tests.workers.cli.test_cli import SCRIPT, run

TASK = "mailguard.send_mail"

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]


def test_cancel_a_parked_and_a_countdown_mail(redis_url: str, smtp_server: SmtpTestServer) -> None:
    """Three mails to one address under ``1/30s`` with ``PARK_AFTER`` 45 s: the first is sent,
    the second (with a mail id of its own) waits 30 s as a countdown, the third 60 s, parked
    (spacing wide enough that the command-line steps below end before either comes due, even
    on a slow machine).
    ``outcome`` names both waiting mails' recipient key (their records leave it to the
    schedule); ``scheduled`` shows the parked one; ``cancel`` asks first (no: nothing changes); with
    ``--yes`` both end dropped / cancelled (state SUCCESS; the second found by its task id),
    neither is sent, and the recipient's budget holds only the first mail: both slots were
    given back."""
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_POLICY="1/30s, 50/1h",
        MAILGUARD_PARK_AFTER="45s",
        MAILGUARD_KIND_NEWS_PRIORITY="2",
    )
    app = client_app(env)
    worker = CeleryWorker(env).start()
    schedule_client = redis.Redis.from_url(env["MAILGUARD_LIMITER_URL"])
    schedule = RedisSchedule(schedule_client, env["MAILGUARD_LIMITER_URL"])
    limiter = Limiter.from_url(
        env["MAILGUARD_LIMITER_URL"],
        Policy.parse("1/30s, 50/1h", name="recipient"),
        secret=env["MAILGUARD_SECRET"],
    )
    try:
        results = []
        for n in range(3):
            results.append(
                app.send_task(
                    TASK,
                    args=["ada@example.com"],
                    kwargs={"subject": "s", "body": "b", "kind": "news"}
                    | ({"mail_id": "own-1"} if n == 1 else {}),
                )
            )
            poll(lambda: results[-1].state in ("SUCCESS", "DEFERRED"), 10, f"mail {n} to run")
        ids = [r.id for r in results]  # the task ids; the second mail has a mail id of its own
        # DEFERRED is stored just before the run parks the mail: wait for the parking itself.
        poll(lambda: schedule.stats().parked == 1, 10, "the third mail to be parked")
        assert schedule.payload(ids[2]) is not None
        # The waiting records leave the recipient to the schedule; ``outcome`` names it.
        recipient = limiter.storage_key("recipient", "ada@example.com")
        for waiting_id, result in ((ids[1], results[1]), (ids[2], results[2])):
            assert result.state == "DEFERRED" and "recipient" not in result.info, result.info
            shown = run(["outcome", waiting_id, "--json"], env)
            assert shown.returncode == 0, shown.stderr
            found = json.loads(shown.stdout)
            assert (found["state"], found["outcome"]["recipient"]) == ("DEFERRED", recipient)
        done = run(["cancel", ids[1], "--yes"], env)  # the countdown mail, before its run
        assert done.returncode == 0, done.stderr
        shown = run(["scheduled", "--json"], env)
        assert shown.returncode == 0, shown.stderr
        report = json.loads(shown.stdout)
        assert (report["parked"], report["by_kind"]) == (1, {"news": 1})
        table = run(["scheduled"], env)
        assert table.returncode == 0 and "parked 1, promoting 0, dead letters 0" in table.stdout
        assert "news" in table.stdout and "ada@" not in table.stdout
        base = {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
        asked = subprocess.run(
            [str(SCRIPT), "cancel", ids[2]],
            env=base | env,
            input="n\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert asked.returncode == 1 and schedule.stats().parked == 1, asked.stderr
        done = run(["cancel", ids[2], "--yes"], env)
        assert done.returncode == 0, done.stderr
        assert schedule.stats().parked == 0
        assert results[2].state == "SUCCESS"
        assert (results[2].result["status"], results[2].result["reason"]) == (
            "dropped",
            "cancelled",
        )
        poll(lambda: results[1].state == "SUCCESS", 45, "the countdown mail to run")
        assert results[1].result["reason"] == "cancelled"
        assert results[1].result["mail_id"] == "own-1", "cancelled by its task id, in the ledger"
        again = run(["cancel", ids[1], "--yes"], env)
        assert again.returncode == 1 and "not waiting" in again.stderr
        # The countdown mail gives its slot back when its run comes (at its slot, 30 s in).
        poll(
            lambda: limiter.peek("ada@example.com").remaining[1] == 49,
            10,
            "both slots given back",
        )
    finally:
        worker.stop()
        app.close()
        schedule_client.close()
        limiter.close()
    assert len(smtp_server.delivered) == 1, "only the first mail was sent"


def test_cancel_a_parked_mail_gives_every_recipient_its_slot_back(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """Given two mails to the same four recipients (a list ``to``, a ``cc`` and a ``bcc``)
    under ``1/20s, 50/1h`` with ``PARK_AFTER`` 5 s: the first is sent, the second is booked
    20 s ahead in every recipient's budget and parked. When it is cancelled, then every
    recipient, not only the first ``to``, has that slot back (49 of 50 left in the hour, as the
    guard's own release would leave it), and nothing more is sent."""
    policy = "1/20s, 50/1h"
    env = worker_env(redis_url, smtp_server.url, MAILGUARD_POLICY=policy, MAILGUARD_PARK_AFTER="5s")
    recipients = ["ann@example.com", "ben@example.com", "cat@example.com", "dan@example.com"]
    call = {
        "args": [recipients[:2]],
        "kwargs": {"subject": "s", "body": "b", "cc": recipients[2], "bcc": [recipients[3]]},
    }
    app = client_app(env)
    worker = CeleryWorker(env).start()
    schedule_client = redis.Redis.from_url(env["MAILGUARD_LIMITER_URL"])
    schedule = RedisSchedule(schedule_client, env["MAILGUARD_LIMITER_URL"])
    limiter = Limiter.from_url(
        env["MAILGUARD_LIMITER_URL"],
        Policy.parse(policy, name="recipient"),
        secret=env["MAILGUARD_SECRET"],
    )

    def left_in_the_hour() -> list[int]:
        return [limiter.peek(address).remaining[1] for address in recipients]

    try:
        first = app.send_task(TASK, **call)
        assert first.get(timeout=20)["status"] == "sent"
        second = app.send_task(TASK, **call)
        poll(lambda: schedule.stats().parked == 1, 15, "the second mail to be parked")
        assert left_in_the_hour() == [48, 48, 48, 48], "both mails counted for everyone"
        done = run(["cancel", second.id, "--yes"], env)
        assert done.returncode == 0, done.stderr
        assert "slot freed" in done.stdout
        assert left_in_the_hour() == [49, 49, 49, 49], "every recipient has its slot back"
        assert second.state == "SUCCESS"
        assert (second.result["status"], second.result["reason"]) == ("dropped", "cancelled")
    finally:
        worker.stop()
        app.close()
        schedule_client.close()
        limiter.close()
    assert len(smtp_server.delivered) == 1, "only the first mail was sent"


@pytest.mark.parametrize(
    "policy", ["1/60s, 5/1h", "recipient: 1/60s; sender: 4/1h; tenant: 4/1d fixed"]
)
def test_cancel_of_a_parked_message_frees_every_recipient(redis_url: str, policy: str) -> None:
    """A parked message to two To addresses, a Cc and a Bcc (one of them twice): cancelling it
    gives the slot back to every recipient, in every scope (the sender's and its tenant's too),
    as the guard's own release does."""
    from mailer.factory import build_guard_limiter  # noqa: PLC0415
    from mailer.limits.multi import acquire_all  # noqa: PLC0415
    from mailer.settings import Settings  # noqa: PLC0415
    from workers.cli.cancel import _cancelled  # noqa: PLC0415
    from workers.waiting.payload import Parked  # noqa: PLC0415

    settings = Settings.from_env(
        {
            "MAILGUARD_LIMITER_URL": redis_url,
            "MAILGUARD_POLICY": policy,
            "MAILGUARD_SECRET": os.urandom(8).hex(),  # a budget of this test's own
        }
    )
    keys = ["ada@example.com", "bob@example.com", "cy@example.com", "dan@example.com"]
    limiter = build_guard_limiter(settings)
    try:
        for key in keys:  # the guard books the message in each recipient with the tenant
            assert limiter.acquire(key, tenant="acme", mail_id="m1").allowed
        assert all(limiter.peek(key, tenant="acme").refused for key in keys)
        entry = Parked(
            task_id="m1",
            args=[["Ada@Example.com", "bob@example.com"]],
            kwargs={
                "mail_id": "m1",
                "cc": "cy@example.com",
                "bcc": ["dan@example.com", "ada@example.com"],
                "tenant": "acme",
            },
            due=time.time() + 600,
        )
        outcome = _cancelled(settings, "m1", {}, entry.encode())
        assert outcome.recipient == limiter.storage_key("recipient", "ada@example.com")
        assert all(limiter.peek(key, tenant="acme").allowed for key in keys)
        assert acquire_all(limiter, keys, mail_id="m2").allowed, "nothing of m1 is held"
    finally:
        limiter.close()
