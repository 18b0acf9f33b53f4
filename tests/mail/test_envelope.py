"""One envelope from ``delay()`` to the wire: every address of a mail is parsed at most twice,
once by ``delay()``'s check and once by the worker's validation, and the transport sends the
envelope made from that second parse (never an address read back out of a header), over a real
SMTP send to the suite's aiosmtpd server, for a mail the worker builds and for a message carried
whole from Django's backend (whose envelope is Django's own)."""

from __future__ import annotations

import email.utils
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from devservers.smtp_server import SmtpTestServer
from mailer import ManualClock
from mailer.guard import Finish, MailRequest
from mailer.mail import address
from mailer.mail.arguments import check_arguments
from mailer.mail.envelope import Envelope, envelope_of, without_recipients
from mailer.mail.message import Mail
from mailer.mail.transports import MemoryTransport
from mailer.mail.transports.smtp import SmtpTransport
from tests.mail.test_carried import _guard, _list_message, _request

#: Where an address can be parsed: mailguard's parses (``mailbox``; ``sender_address`` for the
#: configured sender, which ``delay()`` never sees) and the primitives a stray parse would use
#: (mailguard's normaliser, the email package's, smtplib's ``quoteaddr``).
_PARSES = ("mailbox", "sender_address")
_PARSERS: dict[str, Callable[..., Any]] = {
    "mailbox": address.mailbox,
    "sender_address": address.sender_address,
    "normalise_address": address.normalise_address,
    "getaddresses": email.utils.getaddresses,
    "parseaddr": email.utils.parseaddr,
}


@dataclass
class Parses:
    """Each parse's text, and every primitive called outside a parse (a stray parse)."""

    parsed: Counter[str] = field(default_factory=Counter)
    stray: list[tuple[str, Any]] = field(default_factory=list)
    depth: int = 0


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[Parses]:
    """Every parser replaced, in every loaded module that holds it (mailer, workers, smtplib,
    email), by a counting wrapper; only this test's thread is counted (not the SMTP server's)."""
    counted = Parses()
    me = threading.get_ident()

    def wrapped(name: str, parse: Callable[..., Any]) -> Callable[..., Any]:
        def counting(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == me:
                if name in _PARSES:
                    counted.parsed[str(args[0]).strip()] += 1
                elif not counted.depth:
                    counted.stray.append((name, args[0]))
            counted.depth += 1
            try:
                return parse(*args, **kwargs)
            finally:
                counted.depth -= 1

        return counting

    wrappers = {id(parse): wrapped(name, parse) for name, parse in _PARSERS.items()}
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if not name.startswith(("mailer", "workers", "smtplib", "email")):
            continue
        for attribute, value in list(vars(module).items()):
            if callable(value) and id(value) in wrappers:
                monkeypatch.setattr(module, attribute, wrappers[id(value)])
    _PARSERS["sender_address"].cache_clear()  # type: ignore[attr-defined] # an lru_cache
    yield counted
    _PARSERS["sender_address"].cache_clear()  # type: ignore[attr-defined]


def test_each_address_is_parsed_twice_from_delay_to_rcpt(
    parses: Parses, smtp_server: SmtpTestServer, clock: ManualClock
) -> None:
    """to, cc, bcc and from_email: parsed once by ``delay()``'s check and once by the worker's
    guard; the worker's receipt check bounds them without parsing; neither the transport nor
    smtplib reads an address again (MAIL FROM and RCPT TO carry the
    checked ones: an ASCII local part with the domain in Punycode, else the Unicode form)."""
    call = {
        "to": ["Ada Lovelace <ada@bücher.ch>", "jörg@bücher.ch"],
        "cc": "bob@example.com",
        "bcc": ["Audit <audit@example.org>"],
        "from_email": "Shop <orders@example.org>",
        "subject": "Your order",
        "body": "Shipped.\n",
    }
    checked = check_arguments([], call)  # what send_mail.delay() runs
    received = check_arguments([], checked, addresses=False)  # a worker's receipt check
    assert received == checked
    guard = _guard(SmtpTransport.from_url(smtp_server.url, sleep=lambda _: None), clock)
    step = guard.process(MailRequest(mail_id="m-1", **checked))
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    [got] = smtp_server.delivered
    assert got.mail_from == "orders@example.org"
    assert got.rcpt_tos == (
        "ada@xn--bcher-kva.ch",
        "jörg@bücher.ch",
        "bob@example.com",
        "audit@example.org",
    )
    assert "Audit" not in got.content.decode("utf-8")  # bcc stays off the message
    texts = [*call["to"], call["cc"], *call["bcc"], call["from_email"]]
    assert parses.parsed == Counter({text: 2 for text in texts})
    assert parses.stray == []


def test_a_carried_message_is_sent_to_djangos_envelope_without_reading_its_headers(
    parses: Parses, smtp_server: SmtpTestServer, clock: ManualClock
) -> None:
    """A mailing list's message from Django's backend (To shows the list): its envelope is
    Django's (to, bcc, from_email), each address parsed at ``delay()`` and in the worker; the
    list's address in To and From is never parsed."""
    mail_request, _ = _request(_list_message(), "list-1")
    call = {k: v for k, v in vars(mail_request).items() if v is not None and k != "mail_id"}
    check_arguments([], call)
    guard = _guard(SmtpTransport.from_url(smtp_server.url, sleep=lambda _: None), clock)
    step = guard.process(mail_request)
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    [got] = smtp_server.delivered
    assert got.mail_from == "bounces@example.org"
    assert got.rcpt_tos == ("ada@example.com", "bob@example.com", "audit@example.org")
    assert got.message["To"] == "News <news@example.org>"
    envelope_texts = ["ada@example.com", "bob@example.com", "audit@example.org"]
    assert parses.parsed == Counter({**{t: 2 for t in envelope_texts}, "bounces@example.org": 2})
    assert parses.stray == []


def test_suppression_takes_a_recipient_out_of_the_envelope_by_its_key(
    parses: Parses, smtp_server: SmtpTestServer, clock: ManualClock
) -> None:
    """bob is suppressed: he leaves the envelope and the Cc header the message shows, with no
    address parsed again (the worker's one parse gave his limit key; the configured sender is
    parsed once, in the worker: ``delay()`` never sees it)."""
    guard = _guard(SmtpTransport.from_url(smtp_server.url, sleep=lambda _: None), clock)
    guard.suppressions.suppress("bob@example.com", cause="550 5.1.1 user unknown")
    parses.parsed.clear()
    parses.stray.clear()
    request = MailRequest(
        to="Ada <ada@example.com>", cc=["Bob <bob@example.com>"], mail_id="m-2", body="b"
    )
    step = guard.process(request)
    assert isinstance(step, Finish) and step.outcome.status == "sent", step
    [got] = smtp_server.delivered
    assert got.rcpt_tos == ("ada@example.com",)
    assert got.message["Cc"] is None and got.message["To"] == "Ada <ada@example.com>"
    assert parses.parsed == Counter(
        {"Ada <ada@example.com>": 1, "Bob <bob@example.com>": 1, "Shop <orders@example.org>": 1}
    )
    assert parses.stray == []


def test_a_mail_made_by_hand_is_parsed_once_for_its_envelope() -> None:
    """A ``Mail`` without checked addresses (built by a library user) gets them when its
    envelope is made: the shown forms in To and Cc, the addresses for the envelope, Bcc only in
    the envelope's recipients."""
    mail = Mail(
        to="Ada <ada@Example.com>",
        subject="s",
        body="b",
        mail_id="m-3",
        sender="Shop <orders@example.org>",
        cc=("bob@example.com",),
        bcc=("audit@example.org",),
    )
    envelope = envelope_of(mail)
    assert (envelope.sender, envelope.recipients) == (
        "orders@example.org",
        ("ada@example.com", "bob@example.com", "audit@example.org"),
    )
    assert envelope.message["To"] == "Ada <ada@Example.com>"  # as the Mail shows it
    transport = MemoryTransport()
    transport.send(envelope)
    assert transport.envelopes == [envelope]
    kept = without_recipients(mail, {"bob@example.com"})
    assert kept.cc == () and envelope_of(kept).recipients == (
        "ada@example.com",
        "audit@example.org",
    )


def test_a_sender_header_gives_mail_from() -> None:
    """MAIL FROM is a ``Sender`` header's address when the mail has one, From's otherwise."""
    mail = Mail(
        to="ada@example.com",
        subject="s",
        body="b",
        mail_id="m-4",
        sender="Shop <orders@example.org>",
        headers={"Sender": "Bounces <bounces@example.org>"},
    )
    envelope: Envelope = envelope_of(mail)
    assert envelope.sender == "bounces@example.org"
    assert envelope.from_email == "Shop <orders@example.org>"
