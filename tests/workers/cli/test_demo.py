"""``mailguard demo`` run as a user runs it: the installed script, no MAILGUARD_* variables.

The summary (``--json``) is checked against the policy it prints: every recipient's sent slots
recounted tier by tier, every deferred mail sent at its booking, drops only where a kind's
tolerance was exceeded, and the SMTP server's captured mails equal to the mails sent.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from mailer.limits.policy import Policy

SCRIPT = Path(sys.executable).with_name("mailguard")
ADDRESSES = (
    "ada@example.com",
    "bob@example.com",
    "cy@example.com",
    "mallory@example.com",
    "dee@example.com",
    "reader1@example.com",
)


def clean_env() -> dict[str, str]:
    """This process's environment without any MAILGUARD_* variable."""
    return {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}


def run_demo(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``mailguard demo ARGS``; return the finished process and its wall-clock time."""
    assert SCRIPT.exists(), "the mailguard script is missing: pip install -e . (make install)"
    started = time.monotonic()
    done = subprocess.run(
        [str(SCRIPT), "demo", *args],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done, time.monotonic() - started


def check_summary(summary: dict[str, Any]) -> None:
    """Assert the demo's JSON summary keeps the policy and the kinds' tolerances."""
    policy = Policy.parse(summary["policy"], name="recipient")
    mails = summary["mails"]
    assert summary["complete"] and summary["violations"] == []
    assert {m["status"] for m in mails} <= {"sent", "dropped"}, "nothing failed or unsettled"

    for name, totals in summary["recipients"].items():
        mine = [m for m in mails if m["recipient"] == name]
        slots = sorted(m["due"] for m in mine if m["status"] == "sent")
        for tier in policy.tiers:
            for first, last in zip(slots, slots[tier.limit :], strict=False):
                assert last - first >= tier.window - 1e-6, f"{name} over {tier}"
        assert totals["sent"] == len(slots) == totals["captured"], f"SMTP captured {name}'s mail"

    deferred = [m for m in mails if m["deferred"]]
    assert deferred, "the story defers mails"
    # On a loaded machine a booked code mail (1.25 s of tolerance at --speed 3) can run later
    # than its slot and its deadline: it is dropped (late, expired), never sent late.
    overdue = [m for m in deferred if m["status"] == "dropped"]
    for mail in overdue:
        assert mail["kind"] == "code" and mail["reason"] in ("late", "expired"), mail
    deferred = [m for m in deferred if m not in overdue]
    for mail in deferred:
        assert mail["status"] == "sent", mail
        if not mail["rebooked"]:
            assert mail["due"] == mail["booked"], mail
        # at its slot on the limiter's clock (the SMTP transaction after it is the machine's)
        assert 0.0 <= mail["admitted_at"] - mail["due"] + 1e-3 <= 0.5, mail
    rebooked = [m for m in mails if m["rebooked"]]
    start, end = summary["outage"]["from"], summary["outage"]["until"]
    assert summary["rebooked"] == len(rebooked) >= 1, "the worker's pause makes a mail re-book"
    assert any(m["status"] == "sent" and m["due"] > end for m in rebooked), (
        "a mail late for the pause, sent at a new slot"
    )
    for mail in mails:
        if mail["status"] == "sent":
            assert mail["admitted_at"] - mail["due"] <= 0.5, "sent mails go at their slot"
            assert mail["sent_at"] >= mail["admitted_at"], "sent after the limiter admitted it"

    dropped = [m for m in mails if m["status"] == "dropped" and m not in overdue]
    code_wait = summary["max_wait"]["code"]
    assert dropped, "the abused recipient's codes are dropped"
    for mail in dropped:
        assert (mail["kind"], mail["reason"]) == ("code", "rate_limited"), mail
        # beyond the code's tolerance, counted from its request (queued during the pause: less)
        queued = mail["enqueued_at"] - summary["started"]
        # (one queued during the pause ran a moment after it: 0.5 s of slack for that moment)
        left = code_wait - (end - queued) - 0.5 if start <= queued < end else code_wait
        assert mail["wait"] > left, mail
    for mail in deferred:
        tolerance = summary["max_wait"][mail["kind"]]
        assert mail["wait"] is not None, mail
        assert mail["wait"] <= tolerance + 0.5, "a deferred mail waited within its kind's tolerance"
    assert {m["recipient"] for m in dropped} == {"mallory"}
    burst = summary["burst"]
    assert burst["size"] == 200 and burst["took"] is not None, "every reader got the newsletter"
    # Of the readers still waiting when it was queued (the machine's load decides how many had
    # the newsletter already), the code mail overtook most.
    assert burst["waiting_at_code"] >= 20, "the newsletter was still going out"
    assert burst["code_ahead_of"] >= burst["waiting_at_code"] // 2, "the code mail overtook it"
    # A deferral seen only by its outcome (its DEFERRED state passed between two polls) has no
    # tier: the others must still show every tier binding.
    # (A mail re-booked late may be booked by another tier the second time: all count.)
    binding = ({t for m in deferred for t in m["tiers"]} | {m["tier"] for m in dropped}) - {None}
    assert binding == {str(t) for t in policy.tiers}, "each tier binds somewhere in the story"


@pytest.mark.slow
def test_demo_plays_the_story_within_the_policy_on_embedded_defaults() -> None:
    """The default demo ends by itself in under 90 s, exit 0, its summary keeping the policy."""
    done, took = run_demo("--json")
    assert done.returncode == 0, done.stderr
    assert took < 90, f"the demo took {took:.1f} s"
    summary = json.loads(done.stdout)
    assert summary["policy"] == "1/1s, 5/10s, 10/30s" and summary["broker"] == "memory://"
    assert summary["max_wait"] == {"code": 3.75, "default": 60.0, "notice": 60.0}
    check_summary(summary)
    per = summary["recipients"]
    assert (per["bob"]["sent"], per["bob"]["dropped"]) == (11, 0), "a notice waits for 10/30s"
    assert per["mallory"]["dropped"] >= 5 and per["ada"]["dropped"] == per["cy"]["dropped"] == 0
    assert summary["elapsed"] < 60, "the story plays in under a minute"
    assert "@" not in done.stderr and "Traceback" not in done.stderr, "the worker logs stay quiet"


@pytest.mark.slow
@pytest.mark.redis
def test_demo_against_redis_keeps_the_policy_and_leaves_no_queue(redis_url: str) -> None:
    """--redis runs broker, results and limiter on Redis; the run's own queue is deleted after."""
    done, _ = run_demo("--redis", redis_url, "--speed", "3", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["broker"] == redis_url
    check_summary(summary)
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.keys("*mailguard-demo-*") == [], "no queue or binding of the run is left"
        assert client.keys("celery-task-meta-*"), "the outcomes went to the Redis result backend"
        assert all(0 < client.ttl(k) <= 600 for k in client.keys("celery-task-meta-*"))
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.redis
def test_demo_tables_show_every_mail_and_the_summary_without_addresses(redis_url: str) -> None:
    """Without --json the demo prints each mail's fate and the summary, by short name only."""
    # At --speed 3, as the JSON run above: the story binds each tier only when the worker
    # decides its mails faster than the compressed windows. At --speed 10 the shortest window
    # is 100 ms and a code may wait 0.375 s: on a loaded 2-core machine the worker's decisions
    # come further apart (CI: 23 of the 33 mails sent, none shown booked, no tier named): no
    # speed the demo can promise there. The JSON run checks the same story at --speed 3.
    done, _ = run_demo("--redis", redis_url, "--speed", "3")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("mailguard demo: policy 1/333ms, 5/3333ms, 10/10s per recipient")
    assert f"Redis {redis_url}; worker in this process (threads)" in out.splitlines()[0]
    assert "33/33 settled" in out and "summary per recipient" in out
    assert "no recipient over any tier of 1/333ms, 5/3333ms, 10/10s" in out
    # Which tier binds bob's last notice depends on how fast the worker decides (a loaded
    # machine reaches 10/10s through other tiers' bookings): a booked row names its tier.
    assert "booked t+" in out and "dropped" in out
    assert re.search(r"booked t\+[0-9.]+ \((1/333ms|5/3333ms|10/10s)\)", out), out
    assert "a code mail queued right behind a newsletter to 200 readers" in out
    assert not any(address in out + done.stderr for address in ADDRESSES)


@pytest.mark.slow
def test_ctrl_c_stops_the_worker_and_the_smtp_server_with_exit_code_130() -> None:
    """SIGINT mid-story stops everything within seconds: exit 130, one line on stderr."""
    process = subprocess.Popen(
        [str(SCRIPT), "demo"],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A test runner started in the background inherits SIGINT ignored; a user's shell does not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    try:
        assert process.stdout is not None
        headline = process.stdout.readline()  # printed once the worker and SMTP server run
        assert headline.startswith("mailguard demo: policy"), headline
        time.sleep(1.5)  # mid-story: mails sent, some deferred to booked slots
        process.send_signal(signal.SIGINT)
        started = time.monotonic()
        _, stderr = process.communicate(timeout=20)
        stopped_in = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130
    assert stopped_in < 12, f"took {stopped_in:.1f} s to stop"
    assert stderr.strip().splitlines() == [
        "mailguard: error: demo interrupted (Ctrl-C); the worker and the SMTP server are stopped"
    ]


@pytest.mark.parametrize(
    ("url", "code", "message"),
    [
        ("http://127.0.0.1:1", 2, "--redis http://127.0.0.1:1: expected redis://"),
        ("redis://127.0.0.1:1/0", 1, "cannot reach Redis at redis://127.0.0.1:1/0"),
    ],
)
def test_bad_or_unreachable_redis_is_one_line(url: str, code: int, message: str) -> None:
    """A --redis URL of another scheme is exit 2, an unreachable Redis exit 1; one line each."""
    done, _ = run_demo("--redis", url, timeout=30)
    assert done.returncode == code
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mailguard: error: {message}"), done.stderr
