"""The guard without Celery: validate, ledger, limiter, plan and send, on in-process parts."""

from __future__ import annotations

import pytest

from devservers.redis_servers import RedisServer
from mailer import BackendUnavailable, Kind, Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import Fail, Finish, Guard, GuardConfig, Later, MailRequest, Progress
from mailer.mail.transports import MemoryTransport
from mailer.records.ledger import MemoryLedger
from mailer.steps import Defer, Drop, Send, plan

ADA = "ada@example.com"


def make_guard(clock: ManualClock, **config: object) -> tuple[Guard, MemoryTransport]:
    limiter = Limiter.from_url(
        "memory://", Policy.parse("1/60s, 5/1h, 10/24h", name="recipient"), clock=clock
    )
    transport = MemoryTransport()
    guard = memory_guard(
        limiter,
        MemoryLedger(clock),
        transport,
        kinds=Kinds.defaults(),
        config=GuardConfig(**config),  # type: ignore[arg-type]
        clock=clock,
    )
    return guard, transport


def req(mail_id: str, to: object = ADA, **fields: object) -> MailRequest:
    fields.setdefault("subject", "Hello")
    fields.setdefault("body", "World")
    return MailRequest(to=to, mail_id=mail_id, **fields)  # type: ignore[arg-type]


def test_plan_maps_decisions_to_steps(clock: ManualClock) -> None:
    """Allowed sends, booked defers (the whole wait to the slot), refused drops."""
    limiter = Limiter.from_url("memory://", Policy.parse("1/60s"), clock=clock)
    assert isinstance(plan(limiter.acquire("k", mail_id="a")), Send)
    booked = plan(limiter.acquire("k", mail_id="b", max_wait=3600))
    assert booked == Defer(wait=60, due=clock.now + 60, tier=limiter.policy.tiers[0])
    short = plan(limiter.acquire("j", mail_id="c", max_wait=3600))
    assert isinstance(short, Send)
    dropped = plan(limiter.acquire("k", mail_id="d", max_wait=10))
    assert dropped == Drop(wait=120, tier=limiter.policy.tiers[0])


def test_first_mail_is_sent_with_a_full_outcome(clock: ManualClock) -> None:
    """A valid first mail is sent; the outcome has the recipient hash, never the address."""
    guard, transport = make_guard(clock)
    step = guard.process(req("m1", to="  Ada@Example.COM "))
    assert isinstance(step, Finish)
    outcome = step.outcome
    assert outcome.status == "sent" and outcome.attempts == 1 and outcome.smtp_code == 250
    assert outcome.recipient is not None and "ada" not in outcome.recipient.lower()
    assert outcome.message_id == "<m1@localhost>"
    assert [m["To"] for m in transport.sent] == ["Ada@example.com"]


def test_second_mail_is_deferred_to_its_booked_slot_then_sent(clock: ManualClock) -> None:
    """The second mail waits exactly the minute; run again then, it is sent, not re-booked."""
    guard, transport = make_guard(clock)
    guard.process(req("m1"))
    clock.advance(10)
    step = guard.process(req("m2"))
    assert isinstance(step, Later)
    assert step.wait == 50 and step.outcome.status == "deferred"
    assert step.outcome.reason == "booked" and step.outcome.tier == "1/1m"
    assert step.progress.deferrals == 1
    clock.advance(step.wait)
    again = guard.process(req("m2"), step.progress)
    assert isinstance(again, Finish) and again.outcome.status == "sent"
    assert again.outcome.deferrals == 1 and again.outcome.due == clock.now
    assert len(transport.sent) == 2


def test_long_waits_hop(clock: ManualClock) -> None:
    """A run woken before its slot (a worker caps its countdown at 20 s) hops: it keeps the
    same booking and waits the rest."""
    guard, _ = make_guard(clock)
    guard.process(req("m1"))
    first = guard.process(req("m2"))
    assert isinstance(first, Later) and first.wait == 60 and first.outcome.wait == 60
    clock.advance(20)
    second = guard.process(req("m2"), first.progress)
    assert isinstance(second, Later) and second.wait == 40 and second.outcome.wait == 40
    assert second.outcome.due == first.outcome.due


def test_code_mail_beyond_its_tolerance_is_dropped(clock: ManualClock) -> None:
    """A login code that would wait an hour (max 5 minutes) is dropped with tier and wait."""
    guard, transport = make_guard(clock)
    for i in range(5):
        guard.process(req(f"n{i}", kind="notice"), None)
        clock.advance(60)
    step = guard.process(req("code", kind="code", subject=None, body=None, context={"code": "1"}))
    assert isinstance(step, Finish)
    assert (step.outcome.status, step.outcome.reason) == ("dropped", "rate_limited")
    assert step.outcome.tier == "5/1h" and step.outcome.wait == 3600 - 300
    assert len(transport.sent) == 5


@pytest.mark.parametrize(
    ("request_fields", "detail"),
    [
        ({"to": "no-at-sign"}, "@"),
        ({"to": None}, ""),
        ({"to": "a@example.com\r\nBcc: b@example.com"}, ""),
        ({"subject": "x\nBcc: evil@example.com"}, "subject"),
        ({"kind": "code", "subject": None, "body": None, "context": {}}, "code"),
        ({"kind": "nope"}, "nope"),
        ({"context": ["not", "a", "mapping"]}, "context"),
        ({"headers": {"Bcc": "evil@example.com"}}, "Bcc"),
    ],
)
def test_invalid_input_is_dropped_not_raised(
    clock: ManualClock, request_fields: dict[str, object], detail: str
) -> None:
    """Bad input of every kind ends as dropped/invalid, with a reason, and sends nothing."""
    guard, transport = make_guard(clock)
    step = guard.process(req("bad", **request_fields))
    assert isinstance(step, Finish)
    assert (step.outcome.status, step.outcome.reason) == ("dropped", "invalid")
    assert detail in (step.outcome.detail or "")
    assert transport.sent == []


def test_recorded_mail_is_not_sent_again(clock: ManualClock) -> None:
    """A mail id whose outcome is recorded returns that outcome and sends nothing."""
    guard, transport = make_guard(clock)
    first = guard.process(req("once"))
    again = guard.process(req("once"))
    assert isinstance(first, Finish) and isinstance(again, Finish)
    assert again.outcome == first.outcome and len(transport.sent) == 1


def test_mail_claimed_by_another_worker_waits(clock: ManualClock) -> None:
    """While another worker holds the claim, the mail is deferred (in_flight), not sent."""
    guard, transport = make_guard(clock, claim_lease=30)
    assert guard.ledger.begin("busy", "other-worker", 30) is True
    step = guard.process(req("busy"))
    assert isinstance(step, Later) and step.outcome.reason == "in_flight"
    clock.advance(31)  # the other worker died: its lease ran out
    assert isinstance(guard.process(req("busy")), Finish)
    assert len(transport.sent) == 1


def test_transient_errors_retry_with_doubling_backoff_then_send(clock: ManualClock) -> None:
    """Transient failures come back Later with a doubling backoff, never failed: the mail is
    sent at the first try the relay accepts, once."""
    guard, transport = make_guard(clock, retry_backoff=10)
    transport.fail_next(3)
    progress = None
    countdowns = []
    for _ in range(3):
        step = guard.process(req("flaky"), progress)
        assert isinstance(step, Later) and step.outcome.reason == "smtp_transient"
        countdowns.append(step.wait)
        progress = step.progress
        clock.advance(step.wait)
    assert countdowns == [10, 20, 40]
    final = guard.process(req("flaky"), progress)
    assert isinstance(final, Finish) and final.outcome.status == "sent"
    assert final.outcome.attempts == 4 and len(transport.sent) == 1


def test_permanent_error_fails_at_once_and_releases(clock: ManualClock) -> None:
    """A 550 fails the mail on the first try and gives the recipient's slot back."""
    guard, transport = make_guard(clock)
    transport.fail_next(1, permanent=True)
    step = guard.process(req("rejected"))
    assert isinstance(step, Fail)
    assert (step.outcome.reason, step.outcome.smtp_code, step.outcome.attempts) == (
        "smtp_permanent",
        550,
        1,
    )
    assert guard.limiter.peek(ADA).allowed


def test_limiter_down_defers_with_backoff_or_sends_unguarded(own_redis: RedisServer) -> None:
    """fail_closed defers (doubling waits) while Redis is down; fail_open sends, marked."""
    clock = ManualClock()
    policy = Policy.parse("1/60s")
    for fail_open in (False, True):
        limiter = Limiter.from_url(own_redis.url, policy, secret="s")
        transport = MemoryTransport()
        guard = memory_guard(
            limiter,
            MemoryLedger(clock),
            transport,
            clock=clock,
            config=GuardConfig(fail_open=fail_open, retry_backoff=5),
        )
        own_redis.stop()
        step = guard.process(req(f"down-{fail_open}"))
        if fail_open:
            assert isinstance(step, Finish) and step.outcome.detail == "sent unguarded"
            assert len(transport.sent) == 1
        else:
            assert isinstance(step, Later) and step.outcome.reason == "limiter_unavailable"
            again = guard.process(req("down-False"), step.progress)
            assert isinstance(again, Later) and (step.wait, again.wait) == (5, 10)
            assert transport.sent == []
        own_redis.start()
        limiter.close()


def test_progress_round_trips_and_ignores_junk() -> None:
    """Progress survives the task's kwargs (JSON) and a malformed value starts from zero, its
    turn unknown (-1)."""
    progress = Progress(attempts=3, send_failures=1, limiter_failures=2, deferrals=4, turn=2)
    assert Progress.from_dict(progress.as_dict()) == progress
    assert Progress.from_dict(None) == Progress(turn=-1)
    assert Progress.from_dict("junk") == Progress(turn=-1)  # type: ignore[arg-type]


def test_a_ledger_outage_is_named_the_ledger_even_under_fail_open(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Ledger down: deferred as ``ledger_unavailable`` with backoff, logged as the ledger's."""
    guard, transport = make_guard(clock, fail_open=True, retry_backoff=5)

    def down(*_: object, **__: object) -> None:
        raise BackendUnavailable("redis://ledger:6379/0", backend="ledger")

    guard.ledger.begin = down  # type: ignore[method-assign,assignment]
    with caplog.at_level("WARNING", logger="mailguard"):
        first = guard.process(req("m1"))
        assert isinstance(first, Later)
        second = guard.process(req("m1"), first.progress)
    assert isinstance(second, Later) and transport.sent == []
    assert (first.outcome.reason, first.wait, second.wait) == (
        "ledger_unavailable",
        5,
        10,
    )
    assert "ledger unavailable" in caplog.text and "fail_closed" not in caplog.text
    assert str(first.outcome.detail).startswith("ledger backend redis://ledger:6379/0 ")


def test_dropped_and_failed_mails_stay_final_when_a_copy_runs_again(clock: ManualClock) -> None:
    """Final means final: a redelivered copy answers the recorded drop or failure, sends nothing."""
    guard, transport = make_guard(clock)
    guard.kinds = Kinds.defaults().with_kind(Kind("now", max_wait=0))
    assert isinstance(guard.process(req("first")), Finish)
    dropped = guard.process(req("late", kind="now"))
    assert isinstance(dropped, Finish) and dropped.outcome.reason == "rate_limited"
    clock.advance(120)  # the slot is free now: a fresh decision would send
    again = guard.process(req("late", kind="now"))
    assert again == dropped and len(transport.sent) == 1
    transport.fail_next(1, permanent=True)
    failed = guard.process(req("bad", to="bob@example.com"))
    assert isinstance(failed, Fail)
    assert guard.process(req("bad", to="bob@example.com")) == failed, "a Fail again, no send"
    assert len(transport.sent) == 1


def test_a_sent_mail_whose_record_meets_a_ledger_outage_is_recorded_when_it_returns(
    clock: ManualClock,
) -> None:
    """The ledger down just after a send and back within the claim's lease: the outcome is
    recorded all the same, so a later copy of the mail (a watchdog's) sends nothing again."""
    guard, transport = make_guard(clock, claim_lease=2)
    ledger = guard.ledger
    real_record = ledger.record
    failures = []

    def flaky(outcome: object) -> None:
        if len(failures) < 3:
            failures.append(outcome)
            raise BackendUnavailable("redis://ledger", backend="ledger")
        real_record(outcome)  # type: ignore[arg-type]

    ledger.record = flaky  # type: ignore[method-assign]
    first = guard.process(req("m1"))
    assert isinstance(first, Finish) and first.outcome.status == "sent"
    assert len(failures) == 3, "tried again while the ledger was down"
    clock.advance(3600)  # the lease long over: a later copy takes no claim over
    again = guard.process(req("m1"))
    assert again.outcome.status == "sent" and len(transport.sent) == 1


def test_a_claim_written_after_the_ledger_timed_out_is_taken_over_by_the_next_run(
    clock: ManualClock,
) -> None:
    """A frozen ledger that writes the claim after the client gave up delays by one run only."""
    guard, transport = make_guard(clock)
    ledger = guard.ledger
    real_begin = ledger.begin

    def late_write(mail_id: str, owner: str, lease: float, **options: object) -> object:
        real_begin(mail_id, owner, lease)  # the write lands ...
        raise BackendUnavailable("redis://ledger", backend="ledger")  # ... after the timeout

    ledger.begin = late_write  # type: ignore[method-assign,assignment]
    first = guard.process(req("m1"))
    assert isinstance(first, Later) and first.outcome.reason == "ledger_unavailable"
    ledger.begin = real_begin  # type: ignore[method-assign]
    second = guard.process(req("m1"), first.progress)
    assert isinstance(second, Finish) and second.outcome.status == "sent", second.outcome
    assert len(transport.sent) == 1
    assert guard.process(req("m1"), Progress()) == second, "and it is final"
