"""Holds after throttling replies: the Redis store's keys and outage, the settings, and the
guard's use of holds (what every store promises: tests/records/test_contract_holds.py)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import pytest
import redis
from prometheus_client import CollectorRegistry

from devservers.redis_servers import RedisClusterServers, RedisServer
from devservers.smtp_server import SmtpTestServer
from mailer import BackendUnavailable, Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import Finish, Guard, GuardConfig, Later, MailRequest
from mailer.mail.envelope import Envelope
from mailer.mail.transports import MemoryTransport
from mailer.mail.transports.base import SendReceipt
from mailer.metrics import Metrics
from mailer.records.holds import Hold, Holds, next_hold
from mailer.records.holds.pace import SenderPace
from mailer.records.ledger import MemoryLedger
from mailer.settings import Settings

THROTTLED = (454, "4.7.0 Throttling failure: Maximum sending rate exceeded.")


def test_a_hold_ends_by_itself_on_memory(clock: ManualClock) -> None:
    """Past ``until`` no hold is in force; a new one one length after its end starts again at
    level 0."""
    holds = Holds.from_url("memory://", clock=clock, max_hold=60)
    holds.hold_sender(5, "454")
    clock.advance(5)
    assert holds.active("ada@example.com") == (None, None)
    clock.advance(5)
    assert holds.hold_sender(5, "454").level == 0


@pytest.mark.redis
def test_redis_holds_expire_and_keep_no_address(redis_url: str) -> None:
    """One key per hold with a PX expiry one length after its end (it is remembered that
    long); the recipient's is a keyed hash."""
    holds = Holds.from_url(redis_url, secret="s")
    holds.hold_sender(0.2, "454")
    holds.hold_recipient("ada@example.com", 30, "450 4.2.1")
    client = redis.Redis.from_url(redis_url)
    keys = sorted(k.decode() for k in client.keys("*"))
    assert keys == sorted(["mailguard:hold:sender", holds.key_of("ada@example.com")])
    assert holds.key_of("ada@example.com").startswith("mailguard:hold:{")
    assert "ada" not in "".join(keys)
    assert 30_000 < client.pttl(holds.key_of("ada@example.com")) <= 60_000
    time.sleep(0.5)
    assert client.exists("mailguard:hold:sender") == 0
    assert holds.active("ada@example.com")[0] is None
    client.close()


@pytest.mark.redis
def test_holds_down_is_the_limiter_down(own_redis: RedisServer) -> None:
    """A stopped Redis raises BackendUnavailable naming the limiter, reading or writing."""
    holds = Holds.from_url(own_redis.url)
    own_redis.stop()
    for call in (lambda: holds.active("ada@example.com"), lambda: holds.hold_sender(1, "454")):
        with pytest.raises(BackendUnavailable) as raised:
            call()
        assert raised.value.backend == "limiter"
    own_redis.start()


def test_next_hold_is_pure() -> None:
    """One in force, or ended less than its length ago, doubles its own length; one ended
    longer ago starts over; a reply to a send admitted before it began leaves it."""
    old = Hold(until=110.0, level=2, cause="x", since=100.0)
    assert next_hold(old, 105.0, 3, 60, "y") == Hold(until=125.0, level=3, cause="y", since=105.0)
    assert next_hold(old, 119.0, 3, 60, "y").level == 3
    assert next_hold(old, 120.0, 3, 60, "y") == Hold(until=123.0, level=0, cause="y", since=120.0)
    assert next_hold(old, 105.0, 3, 60, "y", asked=99.0) == old
    assert next_hold(old, 105.0, 30, 60, "y", asked=99.0, stated=True) == Hold(
        until=135.0, level=2, cause="y", since=105.0, stated=True
    )
    assert next_hold(None, 0.0, 30, 60, "y", stated=True).stated


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"MAILGUARD_THROTTLE_HOLD": "0"}, "MAILGUARD_THROTTLE_HOLD "),
        ({"MAILGUARD_THROTTLE_HOLD": "soon"}, "MAILGUARD_THROTTLE_HOLD:"),
        ({"MAILGUARD_THROTTLE_HOLD": "2d"}, "MAILGUARD_THROTTLE_HOLD "),
        ({"MAILGUARD_THROTTLE_HOLD_MAX": "3s"}, "MAILGUARD_THROTTLE_HOLD_MAX"),
        ({"MAILGUARD_GREYLIST_DELAY": "0"}, "MAILGUARD_GREYLIST_DELAY "),
        ({"MAILGUARD_GREYLIST_DELAY": "2d"}, "MAILGUARD_GREYLIST_DELAY "),
        ({"MAILGUARD_GREYLIST_DELAY": "soon"}, "MAILGUARD_GREYLIST_DELAY:"),
        ({"MAILGUARD_HOLD_EVIDENCE": "3"}, "MAILGUARD_HOLD_EVIDENCE:"),
        ({"MAILGUARD_HOLD_EVIDENCE": "x/10s"}, "MAILGUARD_HOLD_EVIDENCE:"),
        ({"MAILGUARD_HOLD_EVIDENCE": "3/soon"}, "MAILGUARD_HOLD_EVIDENCE:"),
        ({"MAILGUARD_HOLD_EVIDENCE": "1/10s"}, "MAILGUARD_HOLD_EVIDENCE "),
        ({"MAILGUARD_HOLD_EVIDENCE": "3/2h"}, "MAILGUARD_HOLD_EVIDENCE "),
        ({"MAILGUARD_THROTTLE_HOLD_MAX": "-1"}, "MAILGUARD_THROTTLE_HOLD_MAX"),
    ],
)
def test_bad_hold_settings_name_their_variable(env: dict[str, str], named: str) -> None:
    """A bad value stops the worker at start with a line naming the variable."""
    with pytest.raises(ValueError, match=named):
        Settings.from_env(env)


def test_hold_settings_reach_the_guard() -> None:
    """``2s`` / ``1m`` / ``20s`` / ``4/30s`` reach GuardConfig; ``off`` turns holds (or the
    evidence rule) off; the defaults are a 5 s first hold, 60 s of greylisting, 3 in 10 s."""
    config = Settings.from_env(
        {
            "MAILGUARD_THROTTLE_HOLD": "2s",
            "MAILGUARD_THROTTLE_HOLD_MAX": "1m",
            "MAILGUARD_GREYLIST_DELAY": "20s",
            "MAILGUARD_HOLD_EVIDENCE": "4/30s",
        }
    ).guard_config()
    assert (config.throttle_hold, config.throttle_hold_max) == (2.0, 60.0)
    assert (config.greylist_delay, config.hold_evidence) == (20.0, (4, 30.0))
    assert Settings.from_env({"MAILGUARD_THROTTLE_HOLD": "off"}).throttle_hold is None
    assert Settings.from_env({"MAILGUARD_HOLD_EVIDENCE": "off"}).hold_evidence is None
    default = Settings.from_env({}).guard_config()
    assert (default.throttle_hold, default.greylist_delay) == (5.0, 60.0)
    assert default.hold_evidence == (3, 10.0)


# The guard ------------------------------------------------------------------------------------


def make_guard(
    clock: ManualClock, policy: str = "100/1s", **config: float | None
) -> tuple[Guard, MemoryTransport]:
    limiter = Limiter.from_url("memory://", Policy.parse(policy), clock=clock)
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


def mail(mail_id: str, to: str = "ada@example.com") -> MailRequest:
    return MailRequest(to=to, mail_id=mail_id, subject="s", body="b")


def test_a_throttling_reply_holds_every_mail_then_they_go_once(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """454 once: the mail and the next one (to someone else) are booked after the hold without
    reaching the transport; after it both go; one line at the start, one at the end."""
    guard, transport = make_guard(clock, throttle_hold=30.0)
    transport.fail_next(1, code=THROTTLED[0], reply=THROTTLED[1])
    start = clock()
    with caplog.at_level(logging.INFO, logger="mailguard"):
        first = guard.process(mail("m1"))
        assert isinstance(first, Later)
        assert (first.outcome.status, first.outcome.reason) == ("deferred", "held")
        assert first.outcome.hold == "sender" and first.outcome.smtp_code == 454
        assert first.outcome.due is not None and first.outcome.due >= start + 30
        tried = transport.attempts
        second = guard.process(mail("m2", to="bob@example.com"))
        assert isinstance(second, Later) and second.outcome.reason == "held"
        assert (second.outcome.smtp_code, second.outcome.smtp_reply) == THROTTLED
        assert transport.attempts == tried, "no transaction during the hold"
        clock.set(first.outcome.due)
        assert guard.process(mail("m1"), first.progress).outcome.status == "sent"
        clock.set(max(clock(), second.outcome.due or 0))
        assert guard.process(mail("m2", to="bob@example.com"), second.progress).outcome.status == (
            "sent"
        )
    lines = [r.getMessage() for r in caplog.records]
    started = [line for line in lines if line.startswith("hold started")]
    assert len(started) == 1 and "sender until" in started[0] and "454" in started[0]
    assert lines.count("hold ended: sender") == 1
    assert len(transport.sent) == 2


def test_a_recipient_throttle_holds_that_recipient_alone(clock: ManualClock) -> None:
    """450 4.2.1: that recipient's next mail waits for the hold; another goes at once."""
    guard, transport = make_guard(clock, throttle_hold=20.0)
    transport.fail_next(1, code=450, reply="4.2.1 The user you are trying to contact is "
                        "receiving mail at a rate that prevents additional messages")  # fmt: skip
    held = guard.process(mail("m1"))
    assert isinstance(held, Later) and held.outcome.hold == "recipient"
    assert held.outcome.due is not None and held.outcome.due >= clock() + 20
    assert guard.process(mail("m2", to="bob@example.com")).outcome.status == "sent"
    again = guard.process(mail("m3", to="Ada@Example.com"))
    assert isinstance(again, Later) and again.outcome.reason == "held"


def test_holds_are_counted_by_scope_and_cause(clock: ManualClock) -> None:
    """mailguard_holds_total{scope,cause}: the reply's code and enhanced status, bounded."""
    registry = CollectorRegistry()
    guard, transport = make_guard(clock, throttle_hold=5.0)
    guard.metrics = Metrics(registry)
    transport.fail_next(1, code=THROTTLED[0], reply=THROTTLED[1])
    guard.process(mail("m1"))
    clock.advance(10)
    transport.fail_next(1, code=450, reply="4.2.1 try again later")
    guard.process(mail("m2", to="bob@example.com"))
    sample = registry.get_sample_value
    assert sample("mailguard_holds_total", {"scope": "sender", "cause": "454 4.7.0"}) == 1
    assert sample("mailguard_holds_total", {"scope": "recipient", "cause": "450 4.2.1"}) == 1


def test_with_holds_off_a_throttling_reply_is_retried_as_before(clock: ManualClock) -> None:
    """THROTTLE_HOLD=off: the 454 is a transient error with backoff, nobody is held."""
    guard, transport = make_guard(clock, throttle_hold=None)
    assert guard.holds is None
    transport.fail_next(1, code=THROTTLED[0], reply=THROTTLED[1])
    step = guard.process(mail("m1"))
    assert isinstance(step, Later) and step.outcome.reason == "smtp_transient"
    assert guard.process(mail("m2", to="bob@example.com")).outcome.status == "sent"


def code_mail(mail_id: str, to: str = "a@example.com") -> MailRequest:
    return MailRequest(to=to, mail_id=mail_id, kind="code", context={"code": "123456"})


def test_a_held_mail_past_its_deadline_is_dropped_when_the_server_stated_the_hold(
    clock: ManualClock,
) -> None:
    """A stated hold longer than the kind's max_wait leaves no slot in time: dropped at once,
    the reason naming the hold, never sent."""
    guard, transport = make_guard(clock, throttle_hold=60.0, throttle_hold_max=3600.0)
    guard.holds.hold_sender(3000, "421 4.7.0 try again in 50 minutes", stated=True)  # type: ignore[union-attr]
    step = guard.process(code_mail("c1"))
    assert isinstance(step, Finish) and step.outcome.status == "dropped", step
    assert step.outcome.hold == "sender" and transport.sent == []
    assert "sender held until" in (step.outcome.detail or "")


def test_a_guessed_hold_past_a_code_deadline_books_it_at_its_latest_slot(
    clock: ManualClock,
) -> None:
    """A guessed hold (the default length, doubled) that ends past a ``code`` mail's deadline
    does not drop it: it is booked just before its deadline, and sent then."""
    guard, transport = make_guard(clock, throttle_hold=5.0, throttle_hold_max=3600.0)
    kind = guard.kinds["code"]
    guard.holds.hold_sender(kind.max_wait * 4, "454 4.7.0 Throttling failure")  # type: ignore[union-attr]
    start = clock()
    step = guard.process(code_mail("c1"))
    assert isinstance(step, Later) and step.outcome.reason == "held", step
    due = step.outcome.due
    assert due is not None and start + kind.max_wait - 0.5 <= due < start + kind.max_wait
    assert "latest slot" in (step.outcome.detail or "")
    clock.set(due)
    sent = guard.process(code_mail("c1"), step.progress)
    assert sent.outcome.status == "sent", sent
    assert len(transport.sent) == 1


def test_the_transport_leaves_hold_replies_to_the_guard(smtp_server: SmtpTestServer) -> None:
    """retry_holds=False (holds on): a 454 is raised after one try, a 451 4.3.0 still retried."""
    from mailer.errors import TransientSendError  # noqa: PLC0415
    from mailer.mail.envelope import envelope_of  # noqa: PLC0415
    from mailer.mail.message import Mail  # noqa: PLC0415
    from mailer.mail.transports import SmtpTransport  # noqa: PLC0415

    envelope = envelope_of(Mail("b@example.com", "s", "x", mail_id="m", sender="a@example.org"))
    transport = SmtpTransport.from_url(smtp_server.url, retry_holds=False, sleep=lambda _: None)
    smtp_server.fail_rcpt(" ".join(map(str, THROTTLED)), times=1)
    with pytest.raises(TransientSendError) as raised:
        transport.send(envelope)
    assert (raised.value.code, raised.value.attempts) == (454, 1)
    smtp_server.fail_rcpt("451 4.3.0 try later", times=1)
    assert transport.send(envelope).attempts == 2


@pytest.mark.redis
@pytest.mark.slow
def test_holds_on_a_redis_cluster(cluster: RedisClusterServers) -> None:
    """On Cluster the two holds live in different slots: set, doubled and read in one pipeline."""
    holds = Holds.from_url(cluster.url, secret="s")
    holds.hold_sender(30, "454")
    assert holds.hold_sender(30, "454").level == 1
    held = holds.hold_recipient("ada@example.com", 30, "450 4.2.1")
    sender, recipient = holds.active("ada@example.com")
    assert sender is not None and sender.level == 1 and recipient == held
    assert holds.active("bob@example.com")[1] is None


@pytest.mark.redis
@pytest.mark.parametrize("policy", ["1/60s, 5/1h", "recipient: 1/60s; sender: 100/1s"])
def test_on_one_redis_the_guard_reads_suppression_and_holds_in_one_round_trip(
    redis_url: str, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Limiter and ledger on one URL (plain or scoped policy): the suppression list and the
    holds share one client, and a run reads both in the ledger's begin (its one MGET, on the
    server: mailer.guard.front), no separate GET or MGET; what it reads steers the mail as the
    separate reads would (suppressed: dropped; sender held: deferred)."""
    from mailer.factory import build_guard  # noqa: PLC0415

    settings = Settings.from_env(
        {
            "MAILGUARD_LIMITER_URL": redis_url,
            "MAILGUARD_SECRET": "s",
            "MAILGUARD_SMTP_URL": "memory://",
            "MAILGUARD_POLICY": policy,
        }
    )
    guard = build_guard(settings, metrics=Metrics(CollectorRegistry()))
    assert guard.holds is not None
    shared = guard.suppressions.plain_read("ada@example.com")
    assert shared is not None and guard.holds.plain_read("ada@example.com") is not None
    assert shared[0] is guard.holds.plain_read("ada@example.com")[0]  # type: ignore[index]

    def no_get(*args: object) -> None:
        raise AssertionError("a separate GET")

    monkeypatch.setattr(shared[0], "get", no_get)
    reads: list[tuple[object, ...]] = []
    mget = shared[0].mget

    def counted_mget(*args: object) -> object:
        reads.append(args)
        return mget(*args)

    # Counted at the client: the scoped limiter's script does an MGET of its own on the server.
    monkeypatch.setattr(shared[0], "mget", counted_mget)
    stats = redis.Redis.from_url(redis_url)
    assert guard.process(mail("r1")).outcome.status == "sent"
    assert not reads, "read with the claim"
    guard.suppressions.suppress("bob@example.com", seconds=60, cause="550 5.1.1 user unknown")
    dropped = guard.process(mail("r2", to="bob@example.com"))
    assert (dropped.outcome.status, dropped.outcome.reason) == ("dropped", "suppressed")
    guard.holds.hold_sender(30, "454 4.7.0 Throttling failure")
    held = guard.process(mail("r3", to="cy@example.com"))
    assert (held.outcome.status, held.outcome.reason) == ("deferred", "held")
    stats.close()


# Proportionate reactions --------------------------------------------------------------------

GREYLISTED = (451, "4.7.1 <ada@example.com>: Recipient address rejected: try again later")


def test_greylisting_books_that_mail_after_its_delay_and_holds_nobody(
    clock: ManualClock,
) -> None:
    """451 4.7.1 try again later: the mail is booked ``greylist_delay`` later (tier and hold
    ``greylisting``), another recipient's mail goes at once, no hold is written; the mail is
    sent after its delay."""
    guard, transport = make_guard(clock, throttle_hold=5.0, greylist_delay=20.0)
    transport.fail_next(1, code=GREYLISTED[0], reply=GREYLISTED[1])
    start = clock()
    step = guard.process(mail("m1"))
    assert isinstance(step, Later), step
    outcome = step.outcome
    assert (outcome.reason, outcome.hold, outcome.tier) == ("held", "greylisting", "greylisting")
    assert outcome.due is not None and start + 20 <= outcome.due < start + 21
    assert "greylisted until" in (outcome.detail or "")
    assert guard.holds is not None and guard.holds.active("ada@example.com") == (None, None)
    assert guard.process(mail("m2", to="bob@example.com")).outcome.status == "sent"
    clock.set(outcome.due)
    assert guard.process(mail("m1"), step.progress).outcome.status == "sent"


def test_a_stated_greylisting_delay_past_the_deadline_drops_naming_greylisting(
    clock: ManualClock,
) -> None:
    """Greylisted for longer than a ``code`` mail is kept: dropped / expired now, with the
    greylisting reply; a guessed delay past the deadline leaves one last try before it."""
    guard, transport = make_guard(clock, throttle_hold=5.0, greylist_delay=86_400.0)
    transport.fail_next(1, code=450, reply="4.2.0 Greylisted for 86000 seconds")
    step = guard.process(code_mail("c1"))
    assert isinstance(step, Finish) and step.outcome.status == "dropped", step
    assert (step.outcome.reason, step.outcome.smtp_code) == ("expired", 450)
    assert step.outcome.smtp_reply == "4.2.0 Greylisted for 86000 seconds"
    transport.fail_next(1, code=GREYLISTED[0], reply=GREYLISTED[1])
    guessed = guard.process(code_mail("c2", to="bob@example.com"))
    assert isinstance(guessed, Later) and guessed.outcome.hold == "greylisting", guessed
    assert guessed.outcome.due is not None and guessed.outcome.due < clock() + 300


def test_a_network_condition_is_retried_and_holds_nobody(clock: ManualClock) -> None:
    """421 4.4.2 (a dropped connection): the default retry rule, no hold."""
    guard, transport = make_guard(clock, throttle_hold=5.0)
    transport.fail_next(1, code=421, reply="4.4.2 connection dropped")
    step = guard.process(mail("m1"))
    assert isinstance(step, Later) and step.outcome.reason == "smtp_transient", step
    assert guard.holds is not None and guard.holds.sender() is None
    assert guard.process(mail("m2", to="bob@example.com")).outcome.status == "sent"


def test_temporary_failures_of_three_recipients_hold_the_sender_two_do_not(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """hold_evidence 3/10s: plain 4xx for two recipients (one of them twice) starts nothing;
    the third distinct recipient within 10 s holds the sender for the first length, its mail
    booked after the hold; the cause says evidence; counted as ``cause="evidence"``."""
    registry = CollectorRegistry()
    guard, transport = make_guard(clock, throttle_hold=5.0, hold_evidence=(3, 10.0))
    guard.metrics = Metrics(registry)
    plain = (451, "4.3.0 Mail server temporarily rejected message.")
    for n, to in enumerate(["ada@example.com", "ada@example.com", "bob@example.com"]):
        transport.fail_next(1, code=plain[0], reply=plain[1])
        step = guard.process(mail(f"e{n}", to=to))
        assert step.outcome.reason == "smtp_transient", step
        clock.advance(1)
    assert guard.holds is not None and guard.holds.sender() is None
    transport.fail_next(1, code=plain[0], reply=plain[1])
    with caplog.at_level(logging.WARNING, logger="mailguard"):
        third = guard.process(mail("e3", to="cy@example.com"))
    assert isinstance(third, Later) and third.outcome.hold == "sender", third
    hold = guard.holds.sender()
    assert hold is not None and hold.length == 5.0 and not hold.stated
    assert hold.cause.startswith("3 recipients failed within 10s, the last with 451")
    assert any(r.getMessage().startswith("hold started: sender") for r in caplog.records)
    sample = registry.get_sample_value
    assert sample("mailguard_holds_total", {"scope": "sender", "cause": "evidence"}) == 1


def test_failures_spread_wider_than_the_window_or_evidence_off_hold_nobody(
    clock: ManualClock,
) -> None:
    """Three recipients failing 6 s apart (window 10 s) are never three within it; with
    ``hold_evidence`` None no count is kept."""
    for evidence, gap in (((3, 10.0), 6.0), (None, 0.0)):
        guard, transport = make_guard(clock, throttle_hold=5.0, hold_evidence=evidence)
        for n, to in enumerate(["ada@example.com", "bob@example.com", "cy@example.com"]):
            transport.fail_next(1, code=451, reply="4.3.0 try later")
            assert guard.process(mail(f"w{n}", to=to)).outcome.reason == "smtp_transient"
            clock.advance(gap)
        assert guard.holds is not None and guard.holds.sender() is None


def test_replies_to_mails_in_flight_before_the_hold_do_not_double_it(clock: ManualClock) -> None:
    """Two mails admitted, then both answered 454: the second reply (to a send admitted
    before the hold began) leaves the 5 s hold as it is; a 454 to a mail sent after the hold
    doubles it (the throttling continued)."""
    guard, transport = make_guard(clock, throttle_hold=5.0)
    holds = guard.holds
    assert holds is not None
    first = holds.hold_sender(5.0, "454", asked=clock())
    echo = holds.hold_sender(5.0, "454", asked=first.since - 0.01)
    assert echo == first
    clock.set(first.until)
    transport.fail_next(1, code=THROTTLED[0], reply=THROTTLED[1])
    step = guard.process(mail("d1"))
    assert isinstance(step, Later) and step.outcome.hold == "sender"
    again = holds.sender()
    assert again is not None and (again.level, again.length) == (1, 10.0)


class MidSend(MemoryTransport):
    """Runs ``meanwhile`` (another worker's refusal) inside its first send, then refuses it:
    two sends in flight answered 454 one after the other."""

    def __init__(self, meanwhile: Callable[[], None]) -> None:
        super().__init__()
        self._meanwhile: Callable[[], None] | None = meanwhile

    def send(self, envelope: Envelope) -> SendReceipt:
        if self._meanwhile is not None:
            meanwhile, self._meanwhile = self._meanwhile, None
            meanwhile()
            self.fail_next(1, code=THROTTLED[0], reply=THROTTLED[1])
        return super().send(envelope)


@pytest.mark.parametrize("behind", [0.0, 0.005], ids=["one clock", "second 5 ms behind"])
@pytest.mark.parametrize("pace", [True, False], ids=["paced", "unpaced"])
def test_two_workers_refused_at_once_tell_one_hold(
    clock: ManualClock, caplog: pytest.LogCaptureFixture, pace: bool, behind: float
) -> None:
    """Two workers' sends in flight, refused within the same millisecond: one hold, told once
    (by the refusal that wrote it); the other mail is booked after it without a second line,
    and with a slow start, one pace started and none slowed (the pace was not halved). Also
    when the second worker's clock is ``behind``, so that the hold it writes began before the
    first worker read the holds (as when a worker reads its clock, waits for the CPU, and
    writes after another worker's read): a refusal doubles only a hold its run saw."""
    limiter = Limiter.from_url("memory://", Policy.parse("100/1s"), clock=clock)
    ledger, config = MemoryLedger(clock), GuardConfig(throttle_hold=5.0)
    holds = Holds.from_url("memory://", clock=clock, max_hold=config.throttle_hold_max)
    if not pace:
        holds.pace.rate = None

    def lagging() -> float:
        return clock() - behind

    pace_of_second = SenderPace(holds.pace._store, clock=lagging, rate=holds.pace.rate)
    holds_of_second = Holds(
        holds._store, clock=lagging, max_hold=config.throttle_hold_max, pace=pace_of_second
    )
    other = MemoryTransport()
    other.fail_next(1, code=THROTTLED[0], reply=THROTTLED[1])
    second = memory_guard(limiter, ledger, other, config=config, clock=clock, holds=holds_of_second)
    steps: list[object] = []

    def refused_meanwhile() -> None:
        clock.advance(0.0004)
        steps.append(second.process(mail("m2", to="bob@example.com")))

    first = memory_guard(
        limiter, ledger, MidSend(refused_meanwhile), config=config, clock=clock, holds=holds
    )
    with caplog.at_level(logging.INFO, logger="mailguard"):
        steps.append(first.process(mail("m1")))
    assert [type(s) for s in steps] == [Later, Later]
    assert all(isinstance(s, Later) and s.outcome.reason == "held" for s in steps)
    lines = [r.getMessage() for r in caplog.records]
    assert sum(line.startswith("hold started") for line in lines) == 1, lines
    assert sum(line.startswith("pace started") for line in lines) == (1 if pace else 0), lines
    assert not any(line.startswith("pace slowed") for line in lines), lines
    held = holds.sender()
    assert held is not None and held.level == 0


# Seen -----------------------------------------------------------------------------------------


def test_the_sender_hold_gauge_reads_seconds_left_at_each_scrape(clock: ManualClock) -> None:
    """mailguard_sender_hold_seconds: the seconds left on the sender's hold, 0 without one;
    holds that cannot be read leave the sample out rather than failing the scrape."""
    from mailer.metrics import HoldCollector  # noqa: PLC0415

    holds = Holds.from_url("memory://", clock=clock, max_hold=60)
    registry = CollectorRegistry()
    registry.register(HoldCollector(holds.sender, clock))
    assert registry.get_sample_value("mailguard_sender_hold_seconds") == 0.0
    holds.hold_sender(5, "454 4.7.0 Throttling failure")
    clock.advance(2)
    assert registry.get_sample_value("mailguard_sender_hold_seconds") == 3.0

    def down() -> Hold | None:
        raise BackendUnavailable("redis://127.0.0.1:1/0")

    broken = CollectorRegistry()
    broken.register(HoldCollector(down, clock))
    assert broken.get_sample_value("mailguard_sender_hold_seconds") is None


@pytest.mark.redis
def test_status_sender_says_why_the_sender_is_held(redis_url: str) -> None:
    """status --sender: the hold's cause, and whether its length was stated by the server or
    is the first length doubled while the throttling continued."""
    from click.testing import CliRunner  # noqa: PLC0415

    from workers.cli import main  # noqa: PLC0415

    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("MAILGUARD_")}
    env |= {"MAILGUARD_LIMITER_URL": redis_url, "MAILGUARD_SECRET": "s1"}
    holds = Holds.from_url(redis_url, secret="s1")
    holds.hold_sender(120, "421 4.7.0 Too many messages, try again in 2 minutes", stated=True)
    shown = CliRunner().invoke(main, ["status", "--sender"], env=env)
    assert shown.exit_code == 0, shown.output
    assert "(421 4.7.0 Too many messages" in shown.output
    assert "2m stated by the server" in shown.output
    redis.Redis.from_url(redis_url).delete("mailguard:hold:sender")
    holds.hold_sender(5, "3 recipients failed within 10 s, the last with 451 4.3.0")
    guessed = CliRunner().invoke(main, ["status", "--sender"], env=env)
    assert "3 recipients failed within 10 s" in guessed.output
    assert "5s: the first length, doubled 0 times" in guessed.output
