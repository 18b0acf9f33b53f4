"""Holds after throttling replies: the Redis store's keys and outage, the settings, and the
guard's use of holds (what every store promises: tests/test_contract_holds.py)."""

from __future__ import annotations

import logging
import time

import pytest
import redis
from prometheus_client import CollectorRegistry

from devservers.redis_servers import RedisServer
from mailer import BackendUnavailable, Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import Finish, Guard, GuardConfig, Later, MailRequest
from mailer.mail.transports import MemoryTransport
from mailer.metrics import Metrics
from mailer.records.holds import Hold, Holds, next_hold
from mailer.records.ledger import MemoryLedger
from mailer.settings import Settings
from tests.smtp_server import SmtpTestServer

THROTTLED = (454, "4.7.0 Throttling failure: Maximum sending rate exceeded.")


def test_a_hold_ends_by_itself_on_memory(clock: ManualClock) -> None:
    """Past ``until`` no hold is in force, and a new one starts again at level 0."""
    holds = Holds.from_url("memory://", clock=clock, max_hold=60)
    holds.hold_sender(5, "454")
    clock.advance(5)
    assert holds.active("ada@example.com") == (None, None)
    assert holds.hold_sender(5, "454").level == 0


@pytest.mark.redis
def test_redis_holds_expire_and_keep_no_address(redis_url: str) -> None:
    """One key per hold with a PX expiry to its end; the recipient's is a keyed hash."""
    holds = Holds.from_url(redis_url, secret="s")
    holds.hold_sender(0.3, "454")
    holds.hold_recipient("ada@example.com", 30, "450 4.2.1")
    client = redis.Redis.from_url(redis_url)
    keys = sorted(k.decode() for k in client.keys("*"))
    assert keys == sorted(["mailguard:hold:sender", holds.key_of("ada@example.com")])
    assert holds.key_of("ada@example.com").startswith("mailguard:hold:{")
    assert "ada" not in "".join(keys)
    assert 0 < client.pttl(holds.key_of("ada@example.com")) <= 30_000
    time.sleep(0.4)
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
    """An ended hold starts over; one in force doubles its own length."""
    old = Hold(until=110.0, level=2, cause="x", since=100.0)
    assert next_hold(old, 105.0, 3, 60, "y") == Hold(until=125.0, level=3, cause="y", since=105.0)
    assert next_hold(old, 110.0, 3, 60, "y").level == 0


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"MAILGUARD_THROTTLE_HOLD": "0"}, "MAILGUARD_THROTTLE_HOLD "),
        ({"MAILGUARD_THROTTLE_HOLD": "soon"}, "MAILGUARD_THROTTLE_HOLD:"),
        ({"MAILGUARD_THROTTLE_HOLD": "2d"}, "MAILGUARD_THROTTLE_HOLD "),
        ({"MAILGUARD_THROTTLE_HOLD_MAX": "30s"}, "MAILGUARD_THROTTLE_HOLD_MAX"),
        ({"MAILGUARD_THROTTLE_HOLD_MAX": "-1"}, "MAILGUARD_THROTTLE_HOLD_MAX"),
    ],
)
def test_bad_hold_settings_name_their_variable(env: dict[str, str], named: str) -> None:
    """A bad value stops the worker at start with a line naming the variable."""
    with pytest.raises(ValueError, match=named):
        Settings.from_env(env)


def test_hold_settings_reach_the_guard() -> None:
    """``2s`` / ``1m`` reach GuardConfig; ``off`` turns holds off."""
    config = Settings.from_env(
        {"MAILGUARD_THROTTLE_HOLD": "2s", "MAILGUARD_THROTTLE_HOLD_MAX": "1m"}
    ).guard_config()
    assert (config.throttle_hold, config.throttle_hold_max) == (2.0, 60.0)
    assert Settings.from_env({"MAILGUARD_THROTTLE_HOLD": "off"}).throttle_hold is None


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
        assert second.outcome.smtp_reply == "454 " + THROTTLED[1]
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


def test_a_held_mail_past_its_deadline_is_dropped(clock: ManualClock) -> None:
    """A hold longer than the kind's max_wait leaves no slot in time: dropped, never sent."""
    guard, transport = make_guard(clock, throttle_hold=60.0, throttle_hold_max=3600.0)
    guard.holds.hold_sender(3000, "421 4.7.0 try again later")  # type: ignore[union-attr]
    step = guard.process(MailRequest(to="a@example.com", mail_id="c1", kind="code", context={
        "code": "123456"}))  # fmt: skip
    assert isinstance(step, Finish) and step.outcome.status == "dropped", step
    assert step.outcome.hold == "sender" and transport.sent == []


def test_the_transport_leaves_hold_replies_to_the_guard(smtp_server: SmtpTestServer) -> None:
    """retry_holds=False (holds on): a 454 is raised after one try, a 451 4.3.0 still retried."""
    from email.message import EmailMessage  # noqa: PLC0415

    from mailer.errors import TransientSendError  # noqa: PLC0415
    from mailer.mail.transports import SmtpTransport  # noqa: PLC0415

    message = EmailMessage()
    message["From"], message["To"], message["Message-ID"] = "a@example.org", "b@example.com", "<m>"
    message.set_content("x")
    transport = SmtpTransport.from_url(smtp_server.url, retry_holds=False, sleep=lambda _: None)
    smtp_server.fail_rcpt(" ".join(map(str, THROTTLED)), times=1)
    with pytest.raises(TransientSendError) as raised:
        transport.send(message)
    assert (raised.value.code, raised.value.attempts) == (454, 1)
    smtp_server.fail_rcpt("451 4.3.0 try later", times=1)
    assert transport.send(message).attempts == 2


@pytest.mark.redis
@pytest.mark.slow
def test_holds_on_a_redis_cluster() -> None:
    """On Cluster the two holds live in different slots: set, doubled and read in one pipeline."""
    from devservers.redis_servers import RedisClusterServers  # noqa: PLC0415

    cluster = RedisClusterServers().start()
    try:
        holds = Holds.from_url(cluster.url, secret="s")
        holds.hold_sender(30, "454")
        assert holds.hold_sender(30, "454").level == 1
        held = holds.hold_recipient("ada@example.com", 30, "450 4.2.1")
        sender, recipient = holds.active("ada@example.com")
        assert sender is not None and sender.level == 1 and recipient == held
        assert holds.active("bob@example.com")[1] is None
    finally:
        cluster.cleanup()


@pytest.mark.redis
@pytest.mark.parametrize("policy", ["1/60s, 5/1h", "recipient: 1/60s; sender: 100/1s"])
def test_on_one_redis_the_guard_reads_suppression_and_holds_in_one_round_trip(
    redis_url: str, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Limiter and ledger on one URL (plain or scoped policy): the suppression list and the
    holds share one client, and a run reads both with one MGET, no separate GET; what it reads
    steers the mail as the separate reads would (suppressed: dropped; sender held: deferred)."""
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
    assert len(reads) == 1
    guard.suppressions.suppress("bob@example.com", seconds=60, cause="550 5.1.1 user unknown")
    dropped = guard.process(mail("r2", to="bob@example.com"))
    assert (dropped.outcome.status, dropped.outcome.reason) == ("dropped", "suppressed")
    guard.holds.hold_sender(30, "454 4.7.0 Throttling failure")
    held = guard.process(mail("r3", to="cy@example.com"))
    assert (held.outcome.status, held.outcome.reason) == ("deferred", "held")
    stats.close()
