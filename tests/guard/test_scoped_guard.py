"""The guard under a scoped policy, without Celery: every scope asked, booked, released."""

from __future__ import annotations

from mailer import Kinds, Limiter, ManualClock
from mailer.factory import memory_guard
from mailer.guard import Finish, Guard, GuardConfig, Later, MailRequest, Progress
from mailer.limits.policy import Policy
from mailer.mail.transports import MemoryTransport
from mailer.records.ledger import MemoryLedger


def make_guard(clock: ManualClock, policy: str) -> tuple[Guard, Limiter]:
    limiter = Limiter.from_url("memory://", Policy.parse(policy, name="recipient"), clock=clock)
    guard = memory_guard(
        limiter,
        MemoryLedger(clock),
        MemoryTransport(),
        kinds=Kinds.defaults(),
        config=GuardConfig(),
        clock=clock,
    )
    return guard, limiter


def req(mail_id: str, to: str, tenant: object = None) -> MailRequest:
    return MailRequest(to=to, mail_id=mail_id, subject="Hi", body="x", tenant=tenant)


def test_the_sender_scope_books_mails_to_different_recipients(clock: ManualClock) -> None:
    """Under sender: 2/1s the third mail, to a new recipient, is booked 1 s on by 'sender 2/1s'."""
    guard, _ = make_guard(clock, "recipient: 1/60s; sender: 2/1s")
    steps = [guard.process(req(f"m{i}", f"user{i}@example.com")) for i in range(3)]
    assert [s.outcome.status for s in steps] == ["sent", "sent", "deferred"]
    third = steps[2]
    assert isinstance(third, Later)
    assert third.outcome.tier == "sender 2/1s"
    assert third.outcome.due == clock.now + 1.0


def test_googlemail_and_gmail_share_one_domain(clock: ManualClock) -> None:
    """Under domain: 1/10s a mail to googlemail.com waits for one just sent to gmail.com."""
    guard, _ = make_guard(clock, "domain: 1/10s")
    first = guard.process(req("g1", "ada@gmail.com"))
    second = guard.process(req("g2", "bob@googlemail.com"))
    other = guard.process(req("o1", "cy@example.com"))
    assert first.outcome.status == "sent" and other.outcome.status == "sent"
    assert second.outcome.status == "deferred" and second.outcome.tier == "domain 1/10s"


def test_the_tenant_scope_counts_only_mails_with_that_tenant(clock: ManualClock) -> None:
    """Under tenant: 1/1h a tenant's second mail waits; other tenants and no tenant do not."""
    guard, _ = make_guard(clock, "tenant: 1/1h")
    statuses = [
        guard.process(req("t1", "a@example.com", "acme")).outcome.status,
        guard.process(req("t2", "b@example.com", "acme")).outcome.status,
        guard.process(req("t3", "c@example.com", "globex")).outcome.status,
        guard.process(req("t4", "d@example.com")).outcome.status,
    ]
    assert statuses == ["sent", "deferred", "sent", "sent"]


def test_a_bad_tenant_is_dropped_invalid(clock: ManualClock) -> None:
    """A tenant that is not 1-64 characters without control characters is dropped invalid."""
    guard, _ = make_guard(clock, "tenant: 1/1h")
    step = guard.process(req("bad", "a@example.com", "x\n"))
    assert isinstance(step, Finish)
    assert step.outcome.reason == "invalid" and "tenant" in (step.outcome.detail or "")


def test_a_late_run_gives_its_slot_back_in_every_scope(clock: ManualClock) -> None:
    """A booked mail that runs late re-books: its old slot leaves the sender and the recipient."""
    guard, limiter = make_guard(clock, "recipient: 5/10s; sender: 1/1s")
    assert guard.process(req("a", "a@example.com")).outcome.status == "sent"
    booked = guard.process(req("b", "b@example.com"))
    assert isinstance(booked, Later) and booked.outcome.due == clock.now + 1.0
    clock.advance(2.5)  # 1.5 s past its slot (late tolerance 1 s); still in the recipient's log
    step = guard.process(req("b", "b@example.com"), booked.progress)
    assert step.outcome.status == "sent"
    assert step.outcome.sent_at == clock.now
    assert limiter.peek("b@example.com").remaining == (4, 0)  # one entry for b; sender full
    # Only the re-booked entry counts now: the next mail waits 1 s from now, not from the slot.
    assert limiter.peek("c@example.com").wait == 1.0


def test_an_expired_mail_releases_every_scope(clock: ManualClock) -> None:
    """A booked mail past its kind's deadline is dropped expired and frees its sender slot."""
    guard, limiter = make_guard(clock, "sender: 1/1h")
    guard.process(req("a", "a@example.com"))
    booked = guard.process(req("b", "b@example.com"))
    assert isinstance(booked, Later)
    assert limiter.release("b@example.com", "b") is True  # it held a slot in the sender
    limiter.acquire("b@example.com", mail_id="b", max_wait=7200)  # and holds it again
    progress: Progress = booked.progress
    clock.advance(2 * 86_400)  # past the default kind's max_wait
    step = guard.process(req("b", "b@example.com"), progress)
    assert step.outcome.reason == "expired"
    assert limiter.release("b@example.com", "b") is False
