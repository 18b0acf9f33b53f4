"""The suppression list: the Redis store's keys and outage, the guard's use of the list, and the
CLI around it (what every store promises: tests/records/test_contract_suppression.py)."""

from __future__ import annotations

import time

import pytest
import redis
from click.testing import CliRunner

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from mailer import BackendUnavailable, Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import Fail, Finish, Guard, MailRequest
from mailer.mail.transports import MemoryTransport
from mailer.records.ledger import MemoryLedger
from mailer.records.suppression import Suppressions
from workers.cli import main


def test_a_suppression_ends_by_itself_on_memory(clock: ManualClock) -> None:
    """Past ``until`` the address is no longer suppressed (memory: the test's clock)."""
    store = Suppressions.from_url("memory://", clock=clock)
    store.suppress("ada@example.com", seconds=10, cause="bounce")
    clock.advance(10)
    assert store.suppressed("ada@example.com") is None


@pytest.mark.redis
def test_redis_keeps_no_address_and_expires_entries(redis_url: str) -> None:
    """Keys are keyed hashes with a PX expiry; no address anywhere in the key space."""
    store = Suppressions.from_url(redis_url, secret="s")
    store.suppress("ada@example.com", seconds=30, cause="bounce")
    client = redis.Redis.from_url(redis_url)
    keys = [k.decode() for k in client.keys("*")]
    assert keys == [store.key_of("ada@example.com")]
    assert keys[0].startswith("mailguard:suppressed:{") and "ada" not in keys[0]
    assert 0 < client.pttl(keys[0]) <= 30_000
    client.close()


@pytest.mark.redis
def test_an_outage_is_the_ledgers(own_redis: RedisServer) -> None:
    """A stopped Redis raises BackendUnavailable naming the ledger."""
    store = Suppressions.from_url(own_redis.url)
    own_redis.stop()
    with pytest.raises(BackendUnavailable) as raised:
        store.suppressed("ada@example.com")
    assert raised.value.backend == "ledger"
    own_redis.start()


def make_guard(clock: ManualClock) -> tuple[Guard, MemoryTransport]:
    limiter = Limiter.from_url("memory://", Policy.parse("100/1s"), clock=clock)
    transport = MemoryTransport()
    guard = memory_guard(
        limiter, MemoryLedger(clock), transport, kinds=Kinds.defaults(), clock=clock
    )
    return guard, transport


def mail(mail_id: str, to: str = "ada@example.com") -> MailRequest:
    return MailRequest(to=to, mail_id=mail_id, subject="s", body="b")


def test_a_hard_bounce_suppresses_and_the_next_mail_is_dropped(clock: ManualClock) -> None:
    """550 5.1.1 fails the mail and suppresses the address; the next mail is never sent."""
    guard, transport = make_guard(clock)
    transport.fail_next(1, permanent=True, code=550, reply="5.1.1 user unknown")
    assert isinstance(guard.process(mail("m1")), Fail)
    dropped = guard.process(mail("m2", to="Ada+x@example.com"))
    assert isinstance(dropped, Finish)
    assert (dropped.outcome.status, dropped.outcome.reason) == ("dropped", "suppressed")
    assert dropped.outcome.smtp_reply == "550 5.1.1 user unknown"
    assert transport.sent == []
    assert isinstance(guard.process(mail("m3", to="bob@example.com")), Finish)
    assert len(transport.sent) == 1, "other recipients are not affected"
    guard.suppressions.lift("ada@example.com")
    assert guard.process(mail("m4")).outcome.status == "sent"


def test_a_content_rejection_does_not_suppress(clock: ManualClock) -> None:
    """554 5.7.1 fails that mail only; the next mail to the address goes to the server."""
    guard, transport = make_guard(clock)
    transport.fail_next(1, permanent=True, code=554, reply="5.7.1 message content rejected")
    assert isinstance(guard.process(mail("m1")), Fail)
    assert guard.process(mail("m2")).outcome.status == "sent"


@pytest.mark.redis
@pytest.mark.slow
def test_a_real_worker_suppresses_after_550_and_the_cli_lifts_it(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """FAILURE once; the next mail dropped without a second RCPT; unsuppress lets one through."""
    env = worker_env(redis_url, smtp_server.url, MAILGUARD_POLICY="100/1s")
    app = client_app(env)
    worker = CeleryWorker(env, concurrency=1).start()
    runner = CliRunner()
    try:
        smtp_server.fail_rcpt("550 5.1.1 <cy@example.com>: user unknown", times=1)
        first = app.send_task("mailguard.send_mail", args=["cy@example.com"], kwargs={"body": "1"})
        with pytest.raises(Exception, match="user unknown"):
            first.get(timeout=20)
        assert first.state == "FAILURE"
        rcpts = smtp_server.handler.rcpt_commands
        shown = runner.invoke(main, ["suppressed", "cy@example.com"], env=env)
        assert shown.exit_code == 0 and "suppressed until" in shown.output
        assert "cy@example.com" not in shown.output
        second = app.send_task("mailguard.send_mail", args=["cy@example.com"], kwargs={"body": "2"})
        outcome = second.get(timeout=20)
        assert (outcome["status"], outcome["reason"]) == ("dropped", "suppressed")
        assert smtp_server.handler.rcpt_commands == rcpts, "the server saw no second RCPT"
        lifted = runner.invoke(main, ["unsuppress", "cy@example.com", "--yes"], env=env)
        assert lifted.exit_code == 0, lifted.output
        third = app.send_task("mailguard.send_mail", args=["cy@example.com"], kwargs={"body": "3"})
        assert third.get(timeout=20)["status"] == "sent"
        added = runner.invoke(main, ["suppress", "dee@example.com", "--for", "1h"], env=env)
        assert added.exit_code == 0, added.output
        fourth = app.send_task(
            "mailguard.send_mail", args=["dee@example.com"], kwargs={"body": "4"}
        )
        assert fourth.get(timeout=20)["reason"] == "suppressed"
        deadline = time.monotonic() + 5
        while len(smtp_server.delivered) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [d.rcpt_tos for d in smtp_server.delivered] == [("cy@example.com",)]
    finally:
        worker.stop()
        app.close()
