"""Each recipient of a mail has its own outcome: the guard on in-process parts, the memory
transport refusing some recipients at "RCPT" as a server would."""

from __future__ import annotations

import json

from mailer import Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import Finish, Guard, MailRequest
from mailer.guard.corecipients import copies
from mailer.mail.transports import MemoryTransport
from mailer.outcomes import PARTIAL, Outcome
from mailer.records.ledger import MemoryLedger

ADA, BOB, NOBODY = "ada@example.com", "bob@example.com", "nobody@example.com"


def make_guard(clock: ManualClock) -> tuple[Guard, MemoryTransport]:
    limiter = Limiter.from_url("memory://", Policy.parse("100/1s"), clock=clock)
    transport = MemoryTransport()
    guard = memory_guard(
        limiter, MemoryLedger(clock), transport, kinds=Kinds.defaults(), clock=clock
    )
    return guard, transport


def mail(mail_id: str, to: object, **fields: object) -> MailRequest:
    return MailRequest(to=to, mail_id=mail_id, subject="s", body="b", **fields)  # type: ignore[arg-type]


def key_of(guard: Guard, address: str) -> str:
    return guard.limiter.storage_key("recipient", address)


def copies_of(guard: Guard, request: MailRequest, outcome: Outcome) -> list[MailRequest]:
    return copies(request, outcome, guard.config.rules, lambda k: key_of(guard, k))


def envelopes(transport: MemoryTransport) -> list[tuple[str, ...]]:
    """The recipients of each envelope the transport took (those it refused included)."""
    return [envelope.recipients for envelope in transport.envelopes]


def test_a_co_recipient_refused_for_good_is_recorded_and_suppressed(clock: ManualClock) -> None:
    """``sent`` / ``partial``: nobody's refusal by its key, code and reply, suppressed, no copy;
    the address nowhere in clear. A later mail to nobody never reaches the transport; one to
    ada and nobody goes to ada alone."""
    guard, transport = make_guard(clock)
    transport.refuse_recipient(NOBODY, 550, "5.1.1 <nobody@example.com>: user unknown")
    step = guard.process(mail("m1", [ADA, NOBODY]))
    assert isinstance(step, Finish)
    outcome = step.outcome
    assert (outcome.status, outcome.reason, outcome.recipient) == (
        "sent",
        PARTIAL,
        key_of(guard, ADA),
    )
    assert outcome.refused == (
        {
            "recipient": key_of(guard, NOBODY),
            "code": 550,
            "reply": "5.1.1 <[recipient]>: user unknown",
            "suppressed": True,
            "retry": None,
        },
    )
    assert "nobody" not in json.dumps(outcome.as_dict())
    assert copies_of(guard, mail("m1", [ADA, NOBODY]), outcome) == []
    before = len(transport.envelopes)
    later = guard.process(mail("m2", NOBODY))
    assert (later.outcome.status, later.outcome.reason) == ("dropped", "suppressed")
    assert len(transport.envelopes) == before
    both = guard.process(mail("m3", [ADA, NOBODY]))
    assert both.outcome.status == "sent" and both.outcome.reason is None
    assert envelopes(transport) == [(ADA, NOBODY), (ADA,)]


def test_a_content_refusal_of_a_co_recipient_is_recorded_not_suppressed(
    clock: ManualClock,
) -> None:
    """A 554 5.7.1 at RCPT says nothing of the mailbox: recorded, the address not suppressed."""
    guard, transport = make_guard(clock)
    transport.refuse_recipient(BOB, 554, "5.7.1 relay access denied")
    outcome = guard.process(mail("m1", [ADA, BOB])).outcome
    assert [(e["code"], e["suppressed"], e["retry"]) for e in outcome.refused] == [
        (554, False, None)
    ]
    assert guard.process(mail("m2", BOB)).outcome.status == "sent"


def test_a_co_recipient_refused_for_a_time_gets_one_copy_alone(clock: ManualClock) -> None:
    """bob refused with 450 once: the outcome names his copy ``m1/2``; the copy goes to bob
    alone, once, however often the mail's run and the copy's run are repeated."""
    guard, transport = make_guard(clock)
    transport.refuse_recipient(BOB, 450, "4.2.0 try again later")
    request = mail("m1", ADA, cc=[BOB])
    outcome = guard.process(request).outcome
    assert (outcome.status, outcome.reason) == ("sent", PARTIAL)
    [entry] = outcome.refused
    assert entry == {
        "recipient": key_of(guard, BOB),
        "code": 450,
        "reply": "4.2.0 try again later",
        "suppressed": False,
        "retry": "m1/2",
    }
    [copy] = copies_of(guard, request, outcome)
    assert (copy.mail_id, copy.to, copy.cc, copy.bcc) == ("m1/2", [], BOB, None)
    assert (copy.subject, copy.body) == (request.subject, request.body)
    sent = guard.process(copy)
    assert (sent.outcome.status, sent.outcome.reason) == ("sent", None)
    assert transport.envelopes[-1].recipients == (BOB,)
    repeat = guard.process(request)  # the mail's run repeated: its recorded outcome
    assert repeat.outcome.refused == outcome.refused
    assert copies_of(guard, request, repeat.outcome) == [copy]
    assert guard.process(copy).outcome.sent_at == sent.outcome.sent_at  # recorded, not re-sent
    assert envelopes(transport) == [(ADA, BOB), (BOB,)]  # bob refused in the first


def test_a_bcc_copy_stays_bcc(clock: ManualClock) -> None:
    """The copy names its recipient where the mail did: a Bcc recipient's copy is Bcc."""
    guard, transport = make_guard(clock)
    transport.refuse_recipient(BOB, 451, "4.3.0 try later")
    request = mail("m1", ADA, bcc=["Bob <bob@example.com>"])
    [copy] = copies_of(guard, request, guard.process(request).outcome)
    assert (copy.to, copy.cc, copy.bcc) == ([], None, "Bob <bob@example.com>")
    guard.process(copy)
    assert transport.envelopes[-1].recipients == (BOB,)
    assert transport.sent[-1]["To"] == "undisclosed-recipients:;"


def test_an_outcome_with_refusals_survives_json(clock: ManualClock) -> None:
    """``as_dict`` through JSON and ``from_dict`` give the outcome back; a waiting record
    leaves an empty ``refused`` out."""
    guard, transport = make_guard(clock)
    transport.refuse_recipient(BOB, 450, "4.2.0 busy")
    outcome = guard.process(mail("m1", [ADA, BOB])).outcome
    assert Outcome.from_dict(json.loads(json.dumps(outcome.as_dict()))) == outcome
    waiting = Outcome(status="deferred", mail_id="w", kind="default")
    assert "refused" not in waiting.as_waiting_dict("w")
    assert Outcome.from_waiting_dict(waiting.as_waiting_dict("w"), "w") == waiting


def test_every_recipient_refused_is_a_refusal_of_the_mail(clock: ManualClock) -> None:
    """Both recipients refused for a time: the mail waits as a whole (no copies, no partial)."""
    guard, transport = make_guard(clock)
    transport.refuse_recipient(ADA, 450, "4.2.0 busy")
    transport.refuse_recipient(BOB, 450, "4.2.0 busy")
    step = guard.process(mail("m1", [ADA, BOB]))
    assert (step.outcome.status, step.outcome.reason) == ("deferred", "smtp_transient")
    assert step.outcome.refused == () and transport.envelopes == []
