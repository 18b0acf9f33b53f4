"""What a person sees by default: mailguard's log lines at INFO without ``-l``, no Celery
"ignored" line for a deferral, ISO times and human durations in text, one shape of held outcome.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from mailer import Kinds, Limiter, ManualClock, Policy
from mailer.durations import human
from mailer.factory import memory_guard
from mailer.guard import Guard, GuardConfig, MailRequest
from mailer.guard.booking import reply_of
from mailer.mail.transports import MemoryTransport
from mailer.outcomes import Outcome
from mailer.records.ledger import MemoryLedger
from workers import app as worker_app
from workers.cli import views

TASK = "mailguard.send_mail"


@pytest.mark.parametrize("loglevel", [None, "INFO"])
def test_a_deferral_is_logged_once_and_not_as_ignored(
    redis_url: str, smtp_server: SmtpTestServer, loglevel: str | None
) -> None:
    """The README's command (no ``-l``) and ``-l INFO``: a deferred mail's "deferred ... by"
    line is in the log once, each send's line too, and Celery's "Task ... ignored" line is
    not (at ``-l INFO`` Celery would write it for every deferral)."""
    env = worker_env(redis_url, smtp_server.url, MAILGUARD_POLICY="1/1s")
    worker = CeleryWorker(env, loglevel=loglevel).start()
    app = client_app(env)
    try:
        results = [app.send_task(TASK, args=["ada@example.com"]) for _ in range(2)]
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not all(r.ready() for r in results):
            time.sleep(0.1)
        outcomes = [r.get(timeout=1) for r in results]
        assert [o["status"] for o in outcomes] == ["sent", "sent"], outcomes
        log = worker.log()
    finally:
        worker.stop()
        app.close()
    deferred = [line for line in log.splitlines() if " deferred " in line]
    assert len(deferred) == 1, log[-3000:]
    assert re.search(r"deferred .* to \d{4}-\d\d-\d\dT\S+ by 1/1s", deferred[0]), deferred
    assert len([line for line in log.splitlines() if " sent to " in line]) == 2, log[-3000:]
    assert "ignored" not in log, log[-3000:]


@pytest.fixture
def mailguard_logger() -> Iterator[logging.Logger]:
    """The ``mailguard`` logger, its level, handlers and propagation restored afterwards."""
    own = logging.getLogger("mailguard")
    saved = own.level, list(own.handlers), own.propagate
    own.setLevel(logging.NOTSET)
    yield own
    own.level, own.handlers[:], own.propagate = saved[0], saved[1], saved[2]


def _root(level: int, handler_level: int = logging.NOTSET) -> logging.Logger:
    """A stand-in for Celery's root logger after its setup: one handler, the ``-l`` level."""
    root = logging.getLogger()
    root.setLevel(level)
    handler = logging.StreamHandler()
    handler.setLevel(handler_level)
    root.handlers[:] = [handler]
    return root


@pytest.fixture
def root_logger() -> Iterator[None]:
    root = logging.getLogger()
    saved = root.level, list(root.handlers)
    yield
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]


@pytest.mark.usefixtures("root_logger")
def test_info_lines_pass_once_whatever_the_level(mailguard_logger: logging.Logger) -> None:
    """-l WARNING: mailguard gets INFO and no handler of its own (the root's writes its lines
    once); -l INFO or DEBUG: nothing changes; a level the project set is kept."""
    worker_app._mailguard_logs_at_info(logger=_root(logging.WARNING))
    assert mailguard_logger.level == logging.INFO
    assert mailguard_logger.handlers == [] and mailguard_logger.propagate
    for level in (logging.INFO, logging.DEBUG):
        mailguard_logger.setLevel(logging.NOTSET)
        worker_app._mailguard_logs_at_info(logger=_root(level))
        assert mailguard_logger.level == logging.NOTSET
    mailguard_logger.setLevel(logging.ERROR)
    worker_app._mailguard_logs_at_info(logger=_root(logging.WARNING))
    assert mailguard_logger.level == logging.ERROR


@pytest.mark.usefixtures("root_logger")
def test_a_root_handler_above_info_gets_a_handler_of_its_own(
    mailguard_logger: logging.Logger,
) -> None:
    """No root handler passes INFO: mailguard writes through its own and stops propagating."""
    worker_app._mailguard_logs_at_info(logger=_root(logging.WARNING, logging.WARNING))
    assert mailguard_logger.level == logging.INFO
    assert len(mailguard_logger.handlers) == 1 and not mailguard_logger.propagate


def _trace_record(name: str, exc: str, description: str = "ignored") -> logging.LogRecord:
    data = {"name": name, "id": "x", "exc": exc, "description": description}
    record = logging.LogRecord(
        "celery.app.trace",
        logging.INFO,
        __file__,
        1,
        "Task %(name)s[%(id)s] %(description)s",
        (data,),
        None,
    )
    record.data = data
    return record


def test_the_ignored_line_is_dropped_for_deferrals_only() -> None:
    quiet = worker_app._QuietDeferrals()
    assert not quiet.filter(_trace_record(TASK, "Deferred('deferred until ...')"))
    assert quiet.filter(_trace_record(TASK, "Ignore()"))
    assert quiet.filter(_trace_record("other.task", "Deferred('x')"))
    assert quiet.filter(_trace_record(TASK, "Reject()", description="rejected"))
    assert any(
        isinstance(f, worker_app._QuietDeferrals)
        for f in logging.getLogger("celery.app.trace").filters
    )


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0s"),
        (0.25, "0.25s"),
        (9.99, "9.99s"),
        (42, "42s"),
        (59.6, "1m"),
        (125, "2m 5s"),
        (3605, "1h"),
        (5400, "1h 30m"),
        (90_061, "1d 1h"),
        (2_592_000, "30d"),
        (-3, "-3s"),
    ],
)
def test_human_durations(seconds: float, shown: str) -> None:
    assert human(seconds) == shown


def test_cli_views_write_iso_times_and_human_durations() -> None:
    assert views.when(1_795_607_637.937) == "2026-11-25T11:53:57+00:00"
    assert views.duration(2_592_000) == "30d"


def _guard(clock: ManualClock, **config: object) -> tuple[Guard, MemoryTransport]:
    limiter = Limiter.from_url("memory://", Policy.parse("100/1s"), clock=clock)
    transport = MemoryTransport()
    guard = memory_guard(
        limiter,
        MemoryLedger(clock),
        transport,
        kinds=Kinds.defaults(),
        clock=clock,
        config=GuardConfig(**config),  # type: ignore[arg-type]
    )
    return guard, transport


def _held(outcome: Outcome) -> tuple[object, ...]:
    return outcome.reason, outcome.hold, outcome.smtp_code, outcome.smtp_reply


def test_every_held_mail_has_one_outcome_shape(clock: ManualClock) -> None:
    """A 454 holds the sender: the mail that received it and those that meet the hold carry the
    same hold, smtp_code and smtp_reply (the reply that started it); the detail is ISO."""
    guard, transport = _guard(clock, throttle_hold=30.0)
    transport.fail_next(1, code=454, reply="4.7.0 Throttling failure")
    first = guard.process(MailRequest(to="ada@example.com", mail_id="m1", subject="s", body="b"))
    clock.advance(1)
    others = [
        guard.process(MailRequest(to=to, mail_id=f"m{n}", subject="s", body="b"))
        for n, to in enumerate(["bob@example.com", "cy@example.com"], start=2)
    ]
    expected = ("held", "sender", 454, "4.7.0 Throttling failure")
    assert [_held(step.outcome) for step in (first, *others)] == [expected] * 3
    assert all(
        re.fullmatch(r"sender held until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", o.outcome.detail)
        for o in (first, *others)
    ), [o.outcome.detail for o in (first, *others)]


def test_a_hold_started_by_evidence_shows_its_last_reply(clock: ManualClock) -> None:
    """hold_evidence 3/10s: the third recipient's 451 holds the sender; its mail and the next
    one carry smtp_code 451 and that reply's text."""
    guard, transport = _guard(clock, throttle_hold=5.0, hold_evidence=(3, 10.0))
    steps = []
    for n, to in enumerate(["ada@example.com", "bob@example.com", "cy@example.com", "dan@x.org"]):
        if n < 3:
            transport.fail_next(1, code=451, reply="4.3.0 Temporarily rejected")
        steps.append(guard.process(MailRequest(to=to, mail_id=f"e{n}", subject="s", body="b")))
        clock.advance(1)
    assert [s.outcome.reason for s in steps[:2]] == ["smtp_transient"] * 2
    expected = ("held", "sender", 451, "4.3.0 Temporarily rejected")
    assert [_held(s.outcome) for s in steps[2:]] == [expected] * 2


@pytest.mark.parametrize(
    ("cause", "reply"),
    [
        ("454 4.7.0 Try later", (454, "4.7.0 Try later")),
        ("421", (421, None)),
        ("3 recipients failed within 10s, the last with 451 4.3.0 x", (451, "4.3.0 x")),
        ("connection lost", (None, "connection lost")),
    ],
)
def test_reply_of_a_hold_cause(cause: str, reply: tuple[int | None, str | None]) -> None:
    assert reply_of(cause) == reply
