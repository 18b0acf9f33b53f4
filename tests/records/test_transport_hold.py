"""The transport's hold: our own side refused (credentials, certificate, sender) holds the
transport, not the mail; one probe on a doubling backoff; lifted when the relay accepts.

The store's contract runs on memory (a manual clock) and on a real Redis (the same calls, the
caller's clock: the script takes ``now``); the guard runs on memory with a manual clock and the
memory transport refusing as a relay does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from mailer import Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import Guard, GuardConfig, Later, MailRequest
from mailer.metrics import HoldCollector, Metrics
from mailer.records.holds import TRANSPORT, Holds, holds_from_url
from mailer.records.holds.transport import FIRST, claim_probe, start_transport
from mailer.records.ledger import MemoryLedger
from mailer.storage import client_from_url
from tests.records.test_holds import mail, make_guard

AUTH_REFUSED = (535, "5.7.8 Error: authentication failed: authentication failure")


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def transport_holds(request: pytest.FixtureRequest, clock: ManualClock) -> Iterator[Holds]:
    """Holds of at most 15 min on each backend, both on the test's manual clock."""
    if request.param == "memory":
        yield holds_from_url("memory://", secret="s", clock=clock, max_hold=900)
        return
    url = str(request.getfixturevalue("redis_url"))
    client = client_from_url(url)
    transport_holds = holds_from_url(url, secret="s", client=client, clock=clock, max_hold=900)
    transport_holds.transport.lift_all()
    yield transport_holds
    transport_holds.transport.lift_all()
    client.close()


def test_the_first_refusal_writes_the_hold_the_others_find_it(
    transport_holds: Holds, clock: ManualClock
) -> None:
    """Given no hold, the first start writes one for a minute; a second start finds it."""
    first = transport_holds.transport.start("535 5.7.8 authentication failed")
    assert first.written and (first.length, first.level) == (FIRST, 0)
    again = transport_holds.transport.start("535 5.7.8 authentication failed")
    assert not again.written and again.until == first.until
    assert transport_holds.transport.current() == first


def test_one_probe_per_backoff_step_doubling_to_the_cap(
    transport_holds: Holds, clock: ManualClock
) -> None:
    """While in force nobody is the probe; once its time has passed one claim is, and the hold
    lasts twice as long from then: 60, 120, 240, 480, then 900 s (the cap), 900 s."""
    transport_holds.transport.start("535")
    assert not transport_holds.transport.claim().written  # type: ignore[union-attr]
    lengths = []
    for _ in range(6):
        clock.set(transport_holds.transport.current().until)  # type: ignore[union-attr]
        probe = transport_holds.transport.claim()
        assert probe is not None and probe.written
        second = transport_holds.transport.claim()
        assert second is not None and not second.written and second.until == probe.until
        lengths.append(probe.length)
    assert lengths == [120, 240, 480, 900, 900, 900]
    assert transport_holds.transport.current().level == 6  # type: ignore[union-attr]


def test_a_hold_is_in_force_until_lifted(transport_holds: Holds, clock: ManualClock) -> None:
    """Past its time the hold is still stored (a probe decides); lift removes it, once."""
    transport_holds.transport.start("535")
    clock.advance(3600)
    assert transport_holds.transport.current() is not None
    assert transport_holds.transport.lift() is True
    assert transport_holds.transport.current() is None and transport_holds.transport.claim() is None
    assert transport_holds.transport.lift() is False


def test_the_rules_are_pure() -> None:
    """start_transport keeps a stored hold; claim_probe claims only past its time."""
    made = start_transport(None, 100.0, 60.0, "x" * 400)
    assert made.written and len(made.cause) == 300
    assert start_transport(made, 130.0, 60.0, "y") is made
    assert claim_probe(None, 0.0, 900) is None
    assert claim_probe(made, 159.0, 900) is made
    probe = claim_probe(made, 160.0, 900)
    assert probe is not None and (probe.since, probe.until, probe.level) == (160.0, 280.0, 1)


# The guard ------------------------------------------------------------------------------------


def test_a_wrong_password_keeps_every_mail_waiting_with_one_error_line(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """535 for each mail in flight: none fails, each is deferred / held with hold transport;
    one ERROR line; mails meeting the hold open no transaction; then one probe at the hold's
    end, refused (a WARNING), the next probe later; the relay accepting it lifts the hold and
    every mail goes once."""
    guard, transport = make_guard(clock, throttle_hold=5.0)
    transport.fail_next(2, permanent=True, code=AUTH_REFUSED[0], reply=AUTH_REFUSED[1])
    with caplog.at_level(logging.INFO, logger="mailguard"):
        steps = [guard.process(mail(f"m{i}", to=f"r{i}@example.com")) for i in range(2)]
        tried = transport.attempts
        steps += [guard.process(mail(f"m{i}", to=f"r{i}@example.com")) for i in range(2, 5)]
        assert transport.attempts == tried, "no transaction while the transport is held"
        for step in steps:
            assert isinstance(step, Later), step.outcome
            assert (step.outcome.status, step.outcome.reason) == ("deferred", "held")
            assert step.outcome.hold == TRANSPORT and step.outcome.smtp_code == 535
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "transport held" in errors[0].getMessage()
        assert "535 5.7.8" in errors[0].getMessage()
        # the first probe, refused again
        transport.fail_next(1, permanent=True, code=AUTH_REFUSED[0], reply=AUTH_REFUSED[1])
        clock.set(max(s.outcome.due or 0.0 for s in steps))
        runs = [guard.process(mail(f"m{i}", to=f"r{i}@example.com"), s.progress)
                for i, s in enumerate(steps)]  # fmt: skip
        assert transport.attempts == tried + 1, "one probe"
        assert all(isinstance(r, Later) and r.outcome.hold == TRANSPORT for r in runs)
        assert any("transport probe refused" in r.getMessage() for r in caplog.records)
        # the password fixed: the next probe is accepted and lifts the hold
        clock.set(max(r.outcome.due or 0.0 for r in runs))
        finals = [guard.process(mail(f"m{i}", to=f"r{i}@example.com"), r.progress)
                  for i, r in enumerate(runs)]  # fmt: skip
        for i, final in enumerate(finals):
            last = final
            if final.outcome.status != "sent":  # booked after the probe's time: goes then
                clock.set(max(clock(), final.outcome.due or 0.0))
                last = guard.process(mail(f"m{i}", to=f"r{i}@example.com"), final.progress)
            assert last.outcome.status == "sent"
    assert len(transport.sent) == 5, "every mail once"
    assert guard.holds is not None and guard.holds.transport.current() is None
    assert any("transport hold lifted" in r.getMessage() for r in caplog.records)
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1


@pytest.mark.parametrize(
    "refusal",
    [
        (530, "5.7.0 Must issue a STARTTLS command first"),
        (553, "5.1.8 <app@example.org>: Sender address rejected: Domain not found"),
        (554, "5.7.1 <ada@example.org>: Relay access denied"),
    ],
)
def test_our_side_refused_holds_the_transport(clock: ManualClock, refusal: tuple[int, str]) -> None:
    """Each refusal of our own side holds the transport; the mail waits, none fails."""
    guard, transport = make_guard(clock, throttle_hold=5.0)
    transport.fail_next(1, permanent=True, code=refusal[0], reply=refusal[1])
    step = guard.process(mail("m1"))
    assert isinstance(step, Later) and step.outcome.hold == TRANSPORT


def test_a_refused_recipient_still_fails_and_holds_nothing(clock: ManualClock) -> None:
    """550 5.1.1 is the recipient's: failed, no transport hold."""
    guard, transport = make_guard(clock, throttle_hold=5.0)
    transport.fail_next(1, permanent=True, code=550, reply="5.1.1 <a@example.com>: User unknown")
    assert guard.process(mail("m1")).outcome.status == "failed"
    assert guard.holds is not None and guard.holds.transport.current() is None


def test_a_mail_whose_deadline_comes_first_is_not_kept_past_it(clock: ManualClock) -> None:
    """A code kind (2 min to live): booked within its deadline, it goes then, and its refusal
    past the deadline ends it dropped / expired, never failed."""
    guard, transport = make_guard(clock, throttle_hold=5.0)
    guard.holds.transport.start("535 5.7.8 refused")  # type: ignore[union-attr]
    clock.advance(FIRST)
    guard.holds.transport.claim()  # type: ignore[union-attr]  # 120 s until the next probe
    request = MailRequest(to="a@example.com", mail_id="c1", subject="s", body="b", kind="code")
    step = guard.process(request)
    assert isinstance(step, Later) and step.outcome.hold == TRANSPORT
    transport.fail_next(5, permanent=True, code=AUTH_REFUSED[0], reply=AUTH_REFUSED[1])
    while isinstance(step, Later):
        clock.set(max(clock(), step.outcome.due or 0.0))
        step = guard.process(request, step.progress)
    assert step.outcome.status in ("dropped", "sent")
    assert step.outcome.status != "failed"


def test_holds_off_leave_the_refusal_a_failure(clock: ManualClock) -> None:
    """With holds off (MAILGUARD_THROTTLE_HOLD=off) a 535 fails the mail, as any 5xx."""
    limiter = Limiter.from_url("memory://", Policy.parse("100/1s"), clock=clock)
    from mailer.mail.transports import MemoryTransport  # noqa: PLC0415

    transport = MemoryTransport()
    guard: Guard = memory_guard(
        limiter, MemoryLedger(clock), transport, kinds=Kinds.defaults(), clock=clock,
        config=GuardConfig(throttle_hold=None),
    )  # fmt: skip
    transport.fail_next(1, permanent=True, code=AUTH_REFUSED[0], reply=AUTH_REFUSED[1])
    assert guard.process(mail("m1")).outcome.status == "failed"


def test_the_transport_gauge_reads_one_while_held(clock: ManualClock) -> None:
    """mailguard_transport_held counts the transport holds stored (the relay's, a sender's);
    0 once lifted."""
    transport_holds = holds_from_url("memory://", clock=clock)
    registry = CollectorRegistry()
    registry.register(
        HoldCollector(transport_holds.sender, clock, transport=transport_holds.transport.held)
    )
    Metrics(registry)
    assert registry.get_sample_value("mailguard_transport_held") == 0
    transport_holds.transport.start("535 5.7.8 refused")
    clock.advance(3600)
    assert registry.get_sample_value("mailguard_transport_held") == 1
    transport_holds.transport.start("553 5.1.8 Sender address rejected", "news@example.org")
    assert registry.get_sample_value("mailguard_transport_held") == 2
    assert transport_holds.transport.lift_all() == 2
    assert registry.get_sample_value("mailguard_transport_held") == 0


def test_a_refused_sender_holds_that_sender_alone(clock: ManualClock) -> None:
    """553 5.1.8 for news@: news@'s mails wait (hold transport), orders@'s still go; a 535
    holds the relay: every sender's mail waits."""
    guard, transport = make_guard(clock, throttle_hold=5.0)
    transport.fail_next(1, permanent=True, code=553, reply="5.1.8 <news@example.org>: Sender "
                        "address rejected: Domain not found")  # fmt: skip

    def from_(mail_id: str, sender: str) -> MailRequest:
        return MailRequest(
            to=f"{mail_id}@example.com", mail_id=mail_id, subject="s", body="b", from_email=sender
        )

    held = guard.process(from_("n1", "News <news@example.org>"))
    assert isinstance(held, Later) and held.outcome.hold == TRANSPORT, held.outcome
    again = guard.process(from_("n2", "News <news@example.org>"))
    assert isinstance(again, Later) and again.outcome.hold == TRANSPORT
    assert guard.process(from_("o1", "orders@example.org")).outcome.status == "sent"
    assert guard.holds is not None
    assert guard.holds.transport.current() is None
    assert guard.holds.transport.current("news <news@example.org>") is not None
    transport.fail_next(1, permanent=True, code=AUTH_REFUSED[0], reply=AUTH_REFUSED[1])
    assert guard.process(from_("o2", "orders@example.org")).outcome.hold == TRANSPORT
    assert guard.process(from_("o3", "orders@example.org")).outcome.hold == TRANSPORT
    assert len(guard.holds.transport.held()) == 2
