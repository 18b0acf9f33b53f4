"""Skewed clocks change nothing: a mail's age and every deadline are measured on the limiter's
clock (the Redis server's ``TIME``; memory: its clock), from when the guard first saw the mail.

Pure tests put the guard on a worker clock far off the limiter's (:class:`ManualClock`s); the
server clock's estimate is tested with an injected monotonic clock; the worker tests run real
Celery prefork workers under libfaketime (``LD_PRELOAD``, ``FAKETIME="+30s"``), next to a
worker on the right time, against the suite's Redis and SMTP server, and check by the SMTP
server's own clock that no mail was dropped, late or early.
"""

from __future__ import annotations

import glob
import subprocess
import time
from itertools import pairwise

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from mailer import ManualClock
from mailer.durations import parse_duration
from mailer.errors import BackendUnavailable
from mailer.factory import memory_guard
from mailer.guard import Finish, Later, Progress
from mailer.limits.limiter import Limiter
from mailer.limits.policy import Policy
from mailer.limits.stores.server_clock import ServerClock
from mailer.mail.transports import MemoryTransport
from mailer.records.ledger import MemoryLedger
from tests.guard.test_guard import req
from tests.waiting import poll

CODE = {"kind": "code", "subject": None, "body": None, "context": {"code": "42"}}


def skewed_guard(limiter_clock: ManualClock, skew: float):  # type: ignore[no-untyped-def]
    """A guard whose own clock (worker, ledger) is ``skew`` seconds off the limiter's, with the
    policy ``1/60s`` and the default kinds (``code``: 5 min)."""
    worker = ManualClock(limiter_clock.now + skew)
    limiter = Limiter.from_url("memory://", Policy.parse("1/60s"), clock=limiter_clock)
    transport = MemoryTransport()
    guard = memory_guard(limiter, MemoryLedger(worker), transport, clock=worker)
    return guard, transport, worker


@pytest.mark.parametrize("skew", [-3600.0, -30.0, 30.0, 3600.0])
def test_a_workers_skew_moves_no_deadline(clock: ManualClock, skew: float) -> None:
    """The worker's clock an hour or 30 s off the limiter's: a code mail booked 60 s ahead is
    sent at its slot (not dropped ``expired``), and one whose slot is past its 5 minutes is
    dropped ``expired`` just after its deadline by the limiter's clock, whatever the worker's."""
    guard, transport, worker = skewed_guard(clock, skew)
    start = clock.now
    assert isinstance(guard.process(req("c0", **CODE)), Finish)
    booked = guard.process(req("c1", **CODE), Progress(requested_at=worker.now - 7200))
    assert isinstance(booked, Later) and booked.outcome.due == start + 60
    assert booked.progress.first_seen == start, "the limiter's clock, not the caller's or ours"
    clock.advance(60)
    worker.advance(60)
    sent = guard.process(req("c1", **CODE), booked.progress)
    assert isinstance(sent, Finish) and sent.outcome.status == "sent", sent
    assert sent.outcome.sent_at == start + 60, "sent_at on the limiter's clock, like due"
    kept = guard.process(req("c2", **CODE), Progress(first_seen=clock.now - 200))
    assert isinstance(kept, Later), "100 s of its 5 minutes left: booked 60 s ahead"
    dropped = guard.process(req("c3", **CODE), Progress(first_seen=clock.now - 301.5))
    assert isinstance(dropped, Finish) and dropped.outcome.reason == "expired"
    assert "5m 2s after the guard first saw it" in (dropped.outcome.detail or "")
    assert len(transport.sent) == 2


def test_redeliveries_do_not_extend_a_deadline(clock: ManualClock) -> None:
    """``first_seen`` is set once: a copy of the mail that comes back (redelivery, a run
    deferred by a limiter outage) keeps counting from the first run's time."""
    guard, _, _ = skewed_guard(clock, 45.0)
    assert isinstance(guard.process(req("c0", **CODE)), Finish)
    booked = guard.process(req("c1", **CODE))
    assert isinstance(booked, Later)
    seen = booked.progress.first_seen
    clock.advance(30)
    again = guard.process(req("c1", **CODE), booked.progress)  # an early copy: a hop
    assert isinstance(again, Later) and again.progress.first_seen == seen


def test_a_late_run_is_late_by_the_limiters_clock_only(clock: ManualClock) -> None:
    """A worker 30 s behind runs a mail on time by the limiter's clock: it keeps its slot (its
    own clock would call it 30 s early; one 30 s ahead would call it late and re-book)."""
    for skew in (-30.0, 30.0):
        limiter_clock = ManualClock(clock.now)
        guard, _, worker = skewed_guard(limiter_clock, skew)
        assert isinstance(guard.process(req("m0")), Finish)
        booked = guard.process(req("m1"))
        assert isinstance(booked, Later)
        limiter_clock.advance(60.2)
        worker.advance(60.2)
        sent = guard.process(req("m1"), booked.progress)
        assert isinstance(sent, Finish) and sent.outcome.due == booked.outcome.due, skew


class _Server:
    """A server clock read by hand: ``reads`` counts the round trips, ``down`` fails them."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.reads = 0
        self.down = False

    def __call__(self) -> float:
        if self.down:
            raise BackendUnavailable("redis://limiter", OSError("down"))
        self.reads += 1
        return self.now


def test_the_server_clock_is_read_once_every_refresh() -> None:
    """``TIME`` once, then carried forward on the monotonic clock (no wall clock involved),
    read again after ``refresh`` seconds; a failed refresh keeps the last reading."""
    server, mono = _Server(1_000.0), ManualClock(50.0)
    clock = ServerClock(server, refresh=10.0, monotonic=mono)
    assert clock() == 1_000.0 and server.reads == 1
    mono.advance(4.5)
    assert clock() == 1_004.5 and server.reads == 1
    mono.advance(6.0)
    server.now = 1_010.7  # the server's clock drifted 0.2 s: the next read follows it
    assert clock() == 1_010.7 and server.reads == 2
    server.down = True
    mono.advance(20.0)
    assert clock() == 1_030.7, "the last reading, carried forward"
    never = ServerClock(server, monotonic=mono)
    with pytest.raises(BackendUnavailable):
        never()


def test_the_redis_limiter_reads_the_servers_clock(redis_url: str) -> None:
    """``Limiter.now()`` on Redis is the server's ``TIME`` (this test's host: the real time),
    within a few milliseconds, and agrees with the time its decisions are made at."""
    limiter = Limiter.from_url(redis_url, Policy.parse("1/60s"), secret="s")
    try:
        before = time.time()
        now = limiter.now()
        assert before - 0.05 <= now <= time.time() + 0.05
        decision = limiter.acquire("ada@example.com")
        assert abs(decision.at - limiter.now()) < 0.05
    finally:
        limiter.close()


# ---- real workers under libfaketime ----

#: Where Debian's ``libfaketime`` package puts the library (``.ci/install-redis`` installs it).
FAKETIME_LIBS = "/usr/lib/*/faketime/libfaketime.so.1"


def faketime(offset: str) -> dict[str, str]:
    """The environment that runs a process ``offset`` (``+30s``) off the real clock; fails the
    test when libfaketime is missing (install the Debian package ``faketime``)."""
    found = sorted(glob.glob(FAKETIME_LIBS))
    if not found:
        pytest.fail(
            f"libfaketime not found ({FAKETIME_LIBS}): install the Debian package faketime "
            "(.ci/install-redis does)"
        )
    env = {"LD_PRELOAD": found[0], "FAKETIME": offset, "FAKETIME_DONT_RESET": "1"}
    shown = subprocess.run(
        ["python3", "-c", "import time; print(time.time())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    skew = float(shown.stdout) - time.time()
    expected = float(offset.rstrip("s"))
    assert abs(skew - expected) < 2.0, f"libfaketime did not skew the clock by {offset}: {skew}"
    return env


def run_mails(env: dict[str, str], offset: str, mails: dict[str, tuple[str, str]]):  # type: ignore[no-untyped-def]
    """Run ``mails`` (mail id: recipient, kind) through a worker ``offset`` off the real clock
    and one on it (prefork, 2 processes each); their outcomes, and the two workers (stopped)."""
    skewed = CeleryWorker(env | faketime(offset), name="skewed").start()
    right = CeleryWorker(env, name="right").start()
    app = client_app(env)
    try:
        results = {
            mail: app.send_task(
                "mailguard.send_mail",
                args=[to],
                kwargs={"kind": kind, "subject": mail, "body": "x", "mail_id": mail}
                | {"_requested_at": round(time.time(), 3)},  # as send_mail.delay stamps it
            )
            for mail, (to, kind) in mails.items()
        }
        poll(lambda: all(r.ready() for r in results.values()), 90, "every mail to settle")
    finally:
        skewed.stop()
        right.stop()
        app.close()
    outcomes = {mail: r.get(timeout=1) for mail, r in results.items()}
    for worker in (skewed, right):
        assert worker.log().count("mailguard.send_mail[") >= 4, f"{worker.name} ran no mail"
    return outcomes


def check_deliveries(smtp: SmtpTestServer, outcomes: dict[str, dict[str, object]]) -> float:
    """By the SMTP server's own clock: each sent mail received once, none before its booked
    slot, no recipient's slots over ``1/1s, 3/5s``; returns how late the latest was after its
    slot."""
    received = {d.message["Subject"]: d for d in smtp.delivered}
    sent = sorted(m for m, o in outcomes.items() if o["status"] == "sent")
    assert sorted(received) == sent, "each sent mail delivered once, nothing else"
    late = 0.0
    for mail in sent:
        due = outcomes[mail].get("due")
        if isinstance(due, float):
            at = received[mail].received_at
            assert at >= due - 0.05, f"{mail} received {due - at:.3f} s before its slot"
            late = max(late, at - due)
    # Over-admission is checked on the slots the limiter gave (a booked mail's ``due``, else
    # its admission at ``sent_at``, both on the limiter's clock), as the chaos audit does: a run
    # within MAILGUARD_LATE_TOLERANCE of its slot keeps it, so received times may be closer.
    by_recipient: dict[str, list[float]] = {}
    for mail in sent:
        slot = outcomes[mail].get("due") or outcomes[mail]["sent_at"]
        assert isinstance(slot, float), outcomes[mail]
        by_recipient.setdefault(str(received[mail].rcpt_tos[0]), []).append(slot)
    for times in by_recipient.values():
        times.sort()
        assert all(b - a >= 1.0 - 0.1 for a, b in pairwise(times)), times
        assert all(c - a >= 5.0 - 0.1 for a, c in zip(times, times[3:], strict=False)), times
    return late


@pytest.mark.slow
@pytest.mark.parametrize("offset", ["+30s", "-30s"])
def test_a_skewed_worker_expires_no_mail(
    redis_url: str, smtp_server: SmtpTestServer, offset: str
) -> None:
    """The chaos run's finding: a worker 30 s ahead dropped every ``code`` mail (8 s) it ran as
    ``expired``, its clock compared with the caller's. Two prefork workers, one 30 s off
    (libfaketime), one on time; 24 ``code`` mails and 8 others, each to a recipient of its own
    (sent at once): every mail sent once, none dropped."""
    env = worker_env(redis_url, smtp_server.url, MAILGUARD_KIND_CODE_MAX_WAIT="8s")
    mails = {f"c-{r}": (f"user{r}@example.com", "code") for r in range(24)}
    mails |= {f"n-{r}": (f"other{r}@example.com", "notice") for r in range(8)}
    outcomes = run_mails(env, offset, mails)
    dropped = {m: o.get("detail") for m, o in outcomes.items() if o["status"] != "sent"}
    assert not dropped, dropped
    check_deliveries(smtp_server, outcomes)
    print(f"worker {offset}: {len(mails)} mails sent, 0 dropped")


@pytest.mark.slow
@pytest.mark.parametrize("offset", ["+30s", "-30s"])
def test_booked_mails_under_a_skewed_worker_are_never_early_nor_dropped_by_its_clock(
    redis_url: str, smtp_server: SmtpTestServer, offset: str
) -> None:
    """8 recipients get 4 mails each under ``1/1s, 3/5s, 5/20s`` (slots up to 5 s ahead), half
    of them ``code`` (8 s), with a worker 30 s off: no mail early, none over the policy, each
    sent at most once. The guard's deadline is counted on the limiter's clock from the first
    run, so a drop says how long the mail really waited: a ``code`` mail is dropped only after
    8 s of real time (a booked run that a skewed worker's Celery held 30 s past its slot: its
    ``eta`` is read on the consuming worker's clock, see docs/timing.md)."""
    env = worker_env(
        redis_url, smtp_server.url, MAILGUARD_KIND_CODE_MAX_WAIT="8s", MAILGUARD_PARK_AFTER="off"
    )
    mails = {
        f"m-{r}-{n}": (f"user{r}@example.com", "code" if (r + n) % 2 else "notice")
        for n in range(4)
        for r in range(8)
    }
    started = time.time()
    outcomes = run_mails(env, offset, mails)
    late = check_deliveries(smtp_server, outcomes)
    dropped = {m: o for m, o in outcomes.items() if o["status"] != "sent"}
    for mail, outcome in dropped.items():
        assert outcome["kind"] == "code" and outcome["reason"] in ("expired", "late"), outcome
        decided = outcome["decided_at"]
        assert isinstance(decided, float)
        if outcome["reason"] == "expired":
            age = parse_duration(str(outcome["detail"]).split(" after", 1)[0])
            assert 8.0 < age <= time.time() - started + 1.0, (mail, outcome["detail"])
    print(
        f"worker {offset}: {len(mails) - len(dropped)} of {len(mails)} booked-scenario mails "
        f"sent, {len(dropped)} dropped after a skewed Celery held their run; latest sent "
        f"{late:.2f} s after its slot"
    )
