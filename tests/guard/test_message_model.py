"""The grown message model through the guard (no Celery): several recipients, cc, bcc,
reply-to, from, attachments; every envelope recipient must have room."""

from __future__ import annotations

import base64
import uuid
from email import message_from_bytes, policy
from typing import Any

import pytest

from mailer import Decision, Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import Finish, Guard, GuardConfig, Later, MailRequest
from mailer.mail.arguments import InvalidArguments, check_arguments
from mailer.mail.transports import MemoryTransport
from mailer.records.ledger import MemoryLedger
from mailer.records.suppression import Suppressions

CSV = base64.b64encode(b"id,total\n2041,99.50\n").decode()


def make_guard(clock: ManualClock) -> tuple[Guard, MemoryTransport, Limiter, Suppressions]:
    limiter = Limiter.from_url(
        "memory://", Policy.parse("1/60s, 5/1h", name="recipient"), clock=clock
    )
    transport = MemoryTransport()
    suppressions = Suppressions.from_url("memory://", clock=clock)
    guard = memory_guard(
        limiter,
        MemoryLedger(clock),
        transport,
        kinds=Kinds.defaults(),
        config=GuardConfig(sender="shop@example.org"),
        clock=clock,
        suppressions=suppressions,
    )
    return guard, transport, limiter, suppressions


def full(mail_id: str, **more: object) -> MailRequest:
    fields: dict[str, object] = {
        "to": ["ada@example.com", "bob@example.com"],
        "cc": ["cy@example.com"],
        "bcc": "dee@example.com",
        "reply_to": ["Support <help@example.org>"],
        "from_email": "Shop <orders@example.org>",
        "attachments": [["invoice.csv", CSV, "text/csv"]],
        "subject": "Your invoice",
        "body": "Attached.",
        "html": "<p>Attached.</p>",
    }
    fields |= more
    return MailRequest(mail_id=mail_id, **fields)  # type: ignore[arg-type]


def test_a_full_message_carries_every_part(clock: ManualClock) -> None:
    """To (two), Cc, Reply-To, From, the HTML alternative and the attachment, intact; Bcc is
    an envelope recipient only (smtplib strips it; checked on a real server elsewhere)."""
    guard, transport, _, _ = make_guard(clock)
    step = guard.process(full("m1"))
    assert isinstance(step, Finish) and step.outcome.status == "sent", step.outcome
    sent = message_from_bytes(transport.sent[0].as_bytes(), policy=policy.default)
    assert sent["To"] == "ada@example.com, bob@example.com" and sent["Cc"] == "cy@example.com"
    assert sent["From"] == "Shop <orders@example.org>"
    assert sent["Reply-To"] == "Support <help@example.org>"
    html = sent.get_body(("html",))
    assert html is not None and "<p>Attached.</p>" in html.get_content()
    (attachment,) = list(sent.iter_attachments())
    assert attachment.get_filename() == "invoice.csv"
    assert attachment.get_content_type() == "text/csv"
    assert attachment.get_payload(decode=True) == b"id,total\n2041,99.50\n"


def test_the_message_waits_for_the_recipient_without_room(clock: ManualClock) -> None:
    """cy (cc) got a mail 20 s ago: the message is booked for all four at cy's next slot, and
    each recipient's budget counts it once."""
    guard, transport, limiter, _ = make_guard(clock)
    assert limiter.acquire("cy@example.com", mail_id="before").allowed
    clock.advance(20)
    step = guard.process(full("m1"))
    assert isinstance(step, Later) and step.outcome.tier == "1/1m" and step.outcome.wait == 40.0
    assert not transport.sent
    for key in ("ada@example.com", "bob@example.com", "cy@example.com", "dee@example.com"):
        assert limiter.acquire(key, mail_id="m1").at == step.outcome.due, key
    clock.advance(40)
    sent = guard.process(full("m1"), step.progress)
    assert isinstance(sent, Finish) and sent.outcome.status == "sent"
    assert [r.remaining[0] for r in (limiter.peek("ada@example.com"),)] == [0]


def test_a_suppressed_recipient_leaves_the_envelope_the_others_get_the_mail(
    clock: ManualClock,
) -> None:
    guard, transport, _, suppressions = make_guard(clock)
    suppressions.suppress("bob@example.com", seconds=3600, cause="550 5.1.1 user unknown")
    step = guard.process(full("m1"))
    assert isinstance(step, Finish) and step.outcome.status == "sent"
    sent = transport.sent[0]
    assert sent["To"] == "ada@example.com" and "bob" not in str(sent)


def test_every_recipient_suppressed_drops_the_message(clock: ManualClock) -> None:
    guard, transport, _, suppressions = make_guard(clock)
    for address in ("ada@example.com", "bob@example.com", "cy@example.com", "dee@example.com"):
        suppressions.suppress(address, seconds=3600, cause="550 5.1.1 user unknown")
    step = guard.process(full("m1"))
    assert isinstance(step, Finish) and step.outcome.reason == "suppressed"
    assert not transport.sent


def test_the_same_address_twice_counts_once(clock: ManualClock) -> None:
    guard, _, limiter, _ = make_guard(clock)
    step = guard.process(full("m1", cc=["Ada@Example.com"], bcc=None))
    assert isinstance(step, Finish) and step.outcome.status == "sent"
    assert limiter.peek("ada@example.com").remaining == (0, 4)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"to": []}, "to must be an address or a list of 1 to 100"),
        ({"to": ["ada@example.com", "not an address"]}, r"to\[1\]: "),
        ({"cc": ["x" * 10]}, r"cc\[0\]: "),
        ({"bcc": [f"u{n}@example.com" for n in range(100)]}, "101 recipients"),
        ({"attachments": [["a.txt", "not base64!", "text/plain"]]}, "not valid base64"),
        ({"attachments": [["a.txt", CSV]]}, r"attachments\[0\] must be \[filename"),
        ({"attachments": [["a.txt", CSV, "csv"]]}, "mimetype must be type/subtype"),
        ({"attachments": [["a\nb.txt", CSV, "text/csv"]]}, "filename must be one line"),
        ({"from_email": "Shop <orders@example.org>\nBcc: x@y.example"}, "must be one line"),
        ({"from_email": "Shop <not an address>"}, "from_email: "),
        ({"headers": {"Bcc": "eve@example.com"}}, "header 'Bcc' is set by mailguard"),
        ({"headers": {"X Tag": "a"}}, "header names must be"),
        ({"headers": {"X-Tag": "a\u2028b"}}, "forbidden control character"),
        (
            {"reply_to": "help@example.org", "headers": {"Reply-To": "x@example.org"}},
            "Reply-To given twice",
        ),
    ],
)
def test_bad_message_parts_are_refused_at_enqueue(fields: dict[str, object], message: str) -> None:
    call = {"to": "ada@example.com", "subject": "s", "body": "b"} | fields
    with pytest.raises(InvalidArguments, match=message):
        check_arguments([], call)


def test_an_oversized_message_is_refused_at_enqueue() -> None:
    big = base64.b64encode(b"x" * 2000).decode()
    with pytest.raises(InvalidArguments, match="MAILGUARD_MAX_MESSAGE_BYTES"):
        check_arguments(
            [],
            {"to": "ada@example.com", "attachments": [["big.bin", big, "application/pdf"]]},
            max_message_bytes=1000,
        )


class _BusyLimiter(Limiter):
    """A real memory limiter where another mail takes cy's next slot each time ``m1`` asks
    for cy (a recipient whose other mails keep arriving): ``m1``'s common slot never settles."""

    def acquire(self, key: str, **kwargs: Any) -> Decision:
        if key == "cy@example.com" and kwargs.get("mail_id") == "m1":
            super().acquire(key, mail_id=f"other-{uuid.uuid4().hex}", max_wait=86_400)
        return super().acquire(key, **kwargs)


def test_a_contended_message_is_deferred_never_sent_unguarded(clock: ManualClock) -> None:
    """No common slot in the bounded rounds: the message is deferred (``contended``), with
    ``fail_open`` too (the limiter works; sending would break "never over"), and holds nothing."""
    limiter = _BusyLimiter.from_url(
        "memory://", Policy.parse("1/60s", name="recipient"), clock=clock
    )
    transport = MemoryTransport()
    guard = memory_guard(
        limiter,
        MemoryLedger(clock),
        transport,
        kinds=Kinds.defaults(),
        config=GuardConfig(sender="shop@example.org", fail_open=True),
        clock=clock,
    )
    step = guard.process(full("m1", bcc=[], attachments=[]))
    assert isinstance(step, Later), step
    assert step.outcome.reason == "contended" and step.outcome.status == "deferred"
    assert not transport.sent
    assert limiter.acquire("ada@example.com", mail_id="free").allowed, "ada holds nothing"
