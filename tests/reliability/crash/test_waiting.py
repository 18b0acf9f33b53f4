"""Crash points while a mail waits: booked and not yet published, being parked, being promoted,
published again by the watchdog, and being cancelled."""

from __future__ import annotations

import signal

import pytest
import redis

from devservers.smtp_server import SmtpTestServer
from mailer.records.schedule import RedisSchedule
from tests.reliability.broker_state import BROKER_DB, unacked_headers
from tests.reliability.crash.harness import NO_SWEEP, WINDOWED, CrashRun
from tests.waiting import poll

pytestmark = [pytest.mark.server, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]

ADA = "ada@example.com"
#: Parks every wait (the spacing is 2 s), so the promoter, not a countdown, brings mails back.
PARK_ALL = {"MAILGUARD_PARK_AFTER": "1s"}


def _schedule(redis_url: str) -> RedisSchedule:
    url = redis_url.rsplit("/", 1)[0] + "/0"
    return RedisSchedule(redis.Redis.from_url(url), url)


def test_killed_booked_before_its_next_run_is_published(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """``booked``: the second mail's run booked a slot and died before parking or publishing
    its next run; its message comes back, and it is sent once, spaced, on time."""
    with CrashRun(redis_url, smtp_server) as run:
        doomed = run.doomed("booked")
        run.send(*[(ADA, f"booked-{n}") for n in range(3)])
        run.wait_dead(doomed)
        run.restart_clean()
        run.check()


def test_killed_once_parked_before_the_ack(redis_url: str, smtp_server: SmtpTestServer) -> None:
    """``parking``: the mail is parked and its message still unacknowledged: two ways back
    (the promoter, the redelivery), one mail sent, at its slot."""
    with CrashRun(redis_url, smtp_server, **PARK_ALL) as run:
        doomed = run.doomed("parking")
        run.send(*[(ADA, f"parking-{n}") for n in range(3)])
        run.wait_dead(doomed)
        run.restart_clean()
        run.check()


def test_killed_promoting_before_the_publish(redis_url: str, smtp_server: SmtpTestServer) -> None:
    """``promoting``: the promoter took a due parked mail under its lease (1 s) and died before
    publishing it; the clean worker takes it again when the lease ends: sent once, on time."""
    with CrashRun(redis_url, smtp_server, **PARK_ALL) as run:
        doomed = run.doomed("promoting")
        run.send(*[(ADA, f"promoting-{n}") for n in range(3)])
        run.wait_dead(doomed)
        run.restart_clean()
        run.check()


def test_the_watchdog_killed_after_its_republish(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """``republished``: the worker holding a recipient's countdowns (the last one 6 s ahead)
    is killed; the next worker's watchdog publishes one again and dies before
    forgetting it (published, not forgotten); a clean worker: each mail sent once, at its slot,
    on time."""
    schedule = _schedule(redis_url)
    with CrashRun(redis_url, smtp_server) as run:
        holder = run.clean("holder", **NO_SWEEP)
        run.send(*[(ADA, f"wd-{n}") for n in range(4)])
        poll(lambda: _holds_only_countdowns(run, schedule), 15, "countdowns held, nothing else")
        holder.kill()
        doomed = run.doomed("republished")
        run.wait_dead(doomed)
        assert schedule.stats().promoting >= 1, "published, not forgotten"
        run.restart_clean()
        run.check()
    schedule.client.close()


def _holds_only_countdowns(run: CrashRun, schedule: RedisSchedule) -> bool:
    """Every mail sent or booked; each booked one watched and held by the worker as a countdown
    (in the broker's unacked hash with an ``eta``); nothing queued, nothing else held."""
    states = [run.app.AsyncResult(mail.mail_id).state for mail in run.mails]
    booked = states.count("DEFERRED")
    if not booked or booked + states.count("SUCCESS") != len(states):
        return False
    if schedule.stats().watched != booked:
        return False
    port = int(run.env["MAILGUARD_BROKER_URL"].rsplit(":", 1)[1].split("/")[0])
    client = redis.Redis(port=port, db=BROKER_DB)
    try:
        queued = sum(client.llen(key) for key in client.scan_iter("mail*", _type="list"))
    finally:
        client.close()
    held = unacked_headers(port)
    return queued == 0 and len(held) == booked and all(h.get("eta") for h in held)


def test_cancel_killed_midway(redis_url: str, smtp_server: SmtpTestServer) -> None:
    """``cancel``: ``mailguard cancel`` dies once the cancellation is recorded, before the
    parked entry leaves the schedule (of four mails under ``1/2s, 3/10s``, the one
    booked 10 s ahead). The promoted run finds the mail cancelled: it ends
    dropped / cancelled, nothing sent; the others are untouched."""
    with CrashRun(redis_url, smtp_server, WINDOWED, **PARK_ALL) as run:
        run.restart_clean()
        run.send(*[(ADA, f"cancel-{n}") for n in range(4)])
        ids = [mail.mail_id for mail in run.mails]
        # Two pool processes book the mails in either order: the one booked last (10 s ahead)
        # is the one to cancel, so the others keep the slots the checker expects.
        poll(
            lambda: sum(run.app.AsyncResult(i).state == "DEFERRED" for i in ids) == 3,
            15,
            "three mails parked",
        )
        waiting = [i for i in ids if run.app.AsyncResult(i).state == "DEFERRED"]
        last = max(waiting, key=lambda i: float(run.app.AsyncResult(i).info["due"]))
        done = run.command("workers.cli", "cancel", last, "--yes", crash_at="cancel")
        assert done.returncode == -signal.SIGKILL, done.err[-2000:]
        run.check()
        assert run.app.AsyncResult(last).result["reason"] == "cancelled"
