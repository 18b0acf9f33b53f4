"""Provider reactions kept local, through real parts: the test DNS (dnsmasq) gives gmail.com,
googlemail.com, a Workspace domain, outlook.com and yahoo.com their providers' MX records, and a
real SMTP server (aiosmtpd) answers Gmail's ``421 4.7.28 ... gsmtp`` to Google recipients only.
Google's mail is held (booked 10 minutes on, the test's injected clock) while Outlook's and
Yahoo's go on time; the slow start after the hold is Google's alone. Holds, paces and the
finder's answers live in memory and on the suite's redis-server."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator

import pytest
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import Envelope, Session
from prometheus_client import CollectorRegistry

from devservers.dns_server import DnsServer
from devservers.smtp_server import RecordingHandler, SmtpTestServer
from mailer import Kinds, Limiter, ManualClock, Policy
from mailer.factory import build_holds, build_transport, memory_guard, relay_of
from mailer.guard import Guard, Later, MailRequest
from mailer.metrics import HoldCollector
from mailer.providers import provider_finder
from mailer.records.holds import Holds, holds_from_url
from mailer.records.ledger import MemoryLedger
from mailer.settings import Settings
from mailer.steps import Step
from tests.workers.cli.test_cli import invoke

#: Gmail's reply to a sender whose rate it limits (support.google.com/a/answer/3726730).
GMAIL_4728 = (
    "421 4.7.28 [192.0.2.1] Our system has detected an unusual rate of unsolicited mail "
    "originating from your IP address. To protect our users from spam, mail sent from your IP "
    "address has been temporarily rate limited. p4si3522070uam.9 - gsmtp"
)
#: The recipient domains at Google by the test DNS (gmail.com, its legacy name, Workspace).
GOOGLE = ("gmail.com", "googlemail.com", "shop.test")
#: Domains at other providers: Microsoft and Yahoo.
OTHERS = ("outlook.com", "yahoo.com")
SECRET = "a test secret of at least thirty-two characters"


class GoogleRefuses(RecordingHandler):
    """Answers ``reply`` to every RCPT of a recipient at a domain of ``domains`` until ``until``
    on ``clock`` (Google's own block), and as :class:`RecordingHandler` does otherwise."""

    def __init__(self, clock: Callable[[], float], domains: tuple[str, ...], reply: str) -> None:
        super().__init__()
        self.clock, self.domains, self.reply = clock, domains, reply
        self.until = 0.0
        self.refused: list[str] = []  # the refused recipients, in order

    async def handle_RCPT(
        self,
        server: SMTPServer,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if address.rpartition("@")[2] in self.domains and self.clock() < self.until:
            self.refused.append(address)
            return self.reply
        return await super().handle_RCPT(server, session, envelope, address, rcpt_options)


@pytest.fixture
def google_server(clock: ManualClock) -> Iterator[SmtpTestServer]:
    """An aiosmtpd server whose handler refuses Google's recipients while told to."""
    server = SmtpTestServer()
    server.handler = server.controller.handler = GoogleRefuses(clock, GOOGLE, GMAIL_4728)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _settings(dns_server: DnsServer, smtp_url: str, **more: str) -> Settings:
    env = {
        "MAILGUARD_SECRET": SECRET,
        "MAILGUARD_SMTP_URL": smtp_url,
        "MAILGUARD_DNS_SERVERS": dns_server.servers,
        "MAILGUARD_DNS_TIMEOUT": "500ms",
        "MAILGUARD_ALLOW_RESERVED_DOMAINS": "test",  # the test DNS's Workspace domain
        "MAILGUARD_SMTP_ATTEMPTS": "1",
        "MAILGUARD_HOLD_EVIDENCE": "off",
    }
    return Settings.from_env(env | {f"MAILGUARD_{k.upper()}": v for k, v in more.items()})


def _guard(settings: Settings, url: str, clock: ManualClock) -> Guard:
    """A guard as the workers wire it (the SMTP transport, holds with the finder and the
    relay's pace), on the injected clock: the limiter and ledger in memory, the holds, paces
    and the finder's answers on ``url``."""
    limiter = Limiter.from_url("memory://", Policy.parse("recipient: 5/1s"), clock=clock)
    finder = provider_finder(
        url, servers=settings.dns_servers, timeout=settings.dns_timeout, secret=SECRET, clock=clock
    )
    holds = holds_from_url(
        url, secret=SECRET, clock=clock, providers=finder, relay=relay_of(settings)
    )
    return memory_guard(
        limiter,
        MemoryLedger(clock),
        build_transport(settings),
        kinds=Kinds.defaults(),
        config=settings.guard_config(),
        clock=clock,
        holds=holds,
    )


def _mail(mail_id: str, to: str) -> MailRequest:
    return MailRequest(to=to, mail_id=mail_id, subject="Hi", body="x")


def _held(guard: Guard) -> Holds:
    assert guard.holds is not None
    return guard.holds


def _due(step: Step) -> float:
    assert isinstance(step, Later) and step.outcome.due is not None, step.outcome
    return step.outcome.due


def _later(step: Step) -> Later:
    assert isinstance(step, Later), step.outcome
    return step


def test_a_4728_holds_google_mail_only_while_outlook_and_yahoo_go_on_time(
    dns_server: DnsServer, google_server: SmtpTestServer, backend_url: str, clock: ManualClock
) -> None:
    """Gmail answers ``421 4.7.28 ... gsmtp``: that mail and every later one to a Google
    recipient (gmail.com, googlemail.com, a Workspace domain) is booked at least 10 minutes on,
    without reaching the server meanwhile; Outlook's and Yahoo's are sent at once, before and
    after. No sender hold is written. After the hold every Google mail is delivered once."""
    handler = google_server.handler
    assert isinstance(handler, GoogleRefuses)
    handler.until = clock() + 600.0
    guard = _guard(_settings(dns_server, google_server.url), backend_url, clock)
    start = clock()
    first = guard.process(_mail("g0", "ada@gmail.com"))
    assert first.outcome.status == "deferred" and first.outcome.hold == "provider google"
    assert first.outcome.smtp_code == 421 and "4.7.28" in (first.outcome.smtp_reply or "")
    assert _due(first) >= start + 600.0
    held = [guard.process(_mail(f"g{n}", f"u{n}@{d}")) for n, d in enumerate(GOOGLE, 1)]
    others = [guard.process(_mail(f"o{n}", f"v{n}@{d}")) for n, d in enumerate(OTHERS * 2)]
    assert [s.outcome.status for s in others] == ["sent"] * 4, [s.outcome for s in others]
    assert all(s.outcome.hold == "provider google" for s in held), [s.outcome for s in held]
    assert all(_due(s) >= start + 600.0 for s in held)
    assert handler.refused == ["ada@gmail.com"]  # the held ones never reached the server
    holds = _held(guard)
    assert holds.sender() is None and set(holds.provider_holds()) == {"google"}
    assert len(google_server.delivered) == 4
    steps = [first, *held]
    for n, step in sorted(enumerate(steps), key=lambda s: _due(s[1])):
        clock.set(_due(step))
        to = "ada@gmail.com" if n == 0 else f"u{n}@{GOOGLE[n - 1]}"
        assert guard.process(_mail(f"g{n}", to), _later(step).progress).outcome.status == "sent"
    assert len(google_server.delivered) == 8
    assert sorted(r for d in google_server.delivered for r in d.rcpt_tos) == sorted(
        ["ada@gmail.com", *(f"u{n}@{d}" for n, d in enumerate(GOOGLE, 1))]
        + [f"v{n}@{d}" for n, d in enumerate(OTHERS * 2)]
    )


def test_the_slow_start_after_googles_hold_is_googles_alone(
    dns_server: DnsServer, google_server: SmtpTestServer, backend_url: str, clock: ManualClock
) -> None:
    """After Google's hold the held Google mails resume one at a time (1 s apart at first, then
    closer: the pace per sender, relay and provider), while an Outlook mail at the hold's end
    goes at once, taking no slot of Google's pace."""
    handler = google_server.handler
    assert isinstance(handler, GoogleRefuses)
    handler.until = clock() + 600.0
    guard = _guard(_settings(dns_server, google_server.url), backend_url, clock)
    steps = [guard.process(_mail(f"g{n}", f"u{n}@gmail.com")) for n in range(6)]
    dues = [_due(s) for s in steps]
    end = _held(guard).provider_holds()["google"].until
    assert dues[0] == pytest.approx(end) and dues[1] == pytest.approx(end + 1.0)
    gaps = [b - a for a, b in itertools.pairwise(dues)]
    assert all(0 < g <= 1.0 + 1e-6 for g in gaps) and gaps[-1] < gaps[0]
    clock.set(end)
    assert guard.process(_mail("o1", "bob@outlook.com")).outcome.status == "sent"
    late = guard.process(_mail("g9", "late@googlemail.com"))  # a new Google mail: paced
    assert late.outcome.hold == "provider google pace" and _due(late) > dues[-1]
    assert _held(guard).pace.current() is None  # the relay's own pace never started
    for n, step in enumerate(steps):
        clock.set(dues[n])
        again = guard.process(_mail(f"g{n}", f"u{n}@gmail.com"), _later(step).progress)
        assert again.outcome.status == "sent"


def test_a_google_reply_for_an_outlook_recipient_holds_the_sender(
    dns_server: DnsServer, smtp_server: SmtpTestServer, clock: ManualClock
) -> None:
    """The two witnesses must agree: a ``4.7.28`` for an Outlook recipient came through Google
    as a relay, and a relay's own rate reply (Postfix's ``too much mail from``) names no
    provider: both hold the sender, every provider's mail waits, as without provider holds."""
    guard = _guard(_settings(dns_server, smtp_server.url), "memory://", clock)
    smtp_server.handler.reply_to_rcpt(GMAIL_4728, address="bob@outlook.com")
    step = guard.process(_mail("o1", "bob@outlook.com"))
    assert step.outcome.hold == "sender"
    assert guard.process(_mail("y1", "cy@yahoo.com")).outcome.hold == "sender"
    holds = _held(guard)
    assert holds.sender() is not None and holds.provider_holds() == {}
    clock.advance(3600.0)
    smtp_server.handler.reply_to_rcpt("450 4.7.1 Error: too much mail from 127.0.0.1")
    relay = guard.process(_mail("g1", "ada@gmail.com"))
    assert relay.outcome.hold == "sender" and holds.provider_holds() == {}


def test_yahoos_suspension_lasts_two_hours_and_holds_yahoo_alone(
    dns_server: DnsServer, smtp_server: SmtpTestServer, clock: ManualClock
) -> None:
    """Yahoo's ``[TSS04]`` suspends Yahoo 2 hours (KumoMTA's rule); Gmail and Outlook go on."""
    guard = _guard(_settings(dns_server, smtp_server.url), "memory://", clock)
    tss04 = (
        "421 4.7.0 [TSS04] Messages from 192.0.2.1 temporarily deferred due to unexpected "
        "volume or user complaints - 4.16.55.1; see https://postmaster.yahooinc.com/error-codes"
    )
    smtp_server.handler.reply_to_rcpt(tss04, address="cy@yahoo.com")
    start = clock()
    step = guard.process(_mail("y1", "cy@yahoo.com"))
    assert step.outcome.hold == "provider yahoo" and _due(step) >= start + 7200.0
    assert guard.process(_mail("g1", "ada@gmail.com")).outcome.status == "sent"
    assert guard.process(_mail("o1", "bob@outlook.com")).outcome.status == "sent"
    assert set(_held(guard).provider_holds()) == {"yahoo"}


def test_provider_holds_off_hold_the_sender_and_ask_no_dns(
    dns_server: DnsServer, smtp_server: SmtpTestServer, clock: ManualClock
) -> None:
    """``MAILGUARD_PROVIDER_HOLDS=off``: the holds get no finder; a 4.7.28 holds the sender (as
    before provider holds), and no DNS query is made."""
    settings = _settings(dns_server, smtp_server.url, provider_holds="off")
    assert not settings.provider_holds
    limiter = Limiter.from_url("memory://", Policy.parse("5/1s"), clock=clock)
    assert build_holds(settings, limiter).providers is None
    on = build_holds(_settings(dns_server, smtp_server.url), limiter)
    assert on.providers is not None
    before = dns_server.queries("gmail.com")
    guard = memory_guard(
        limiter,
        MemoryLedger(clock),
        build_transport(settings),
        config=settings.guard_config(),
        clock=clock,
        holds=build_holds(settings, limiter),
    )
    smtp_server.handler.reply_to_rcpt(GMAIL_4728)
    assert guard.process(_mail("g1", "ada@gmail.com")).outcome.hold == "sender"
    assert dns_server.queries("gmail.com") == before


@pytest.mark.redis
def test_status_and_the_gauge_show_a_providers_hold(redis_url: str) -> None:
    """``mailguard status --sender`` names the provider held (text and JSON) and says the
    sender itself is not held; the gauge has one sample per ruled provider, Google's the
    seconds left."""
    env = {"MAILGUARD_LIMITER_URL": redis_url, "MAILGUARD_SECRET": SECRET}
    holds = build_holds(Settings.from_env(env))
    assert holds.providers is not None
    holds.hold_provider("google", 600.0, GMAIL_4728)
    shown = invoke(["status", "--sender"], env)
    assert shown.exit_code == 0, shown.output
    assert "sender: no hold" in shown.stdout
    assert "sender held at provider google until" in shown.stdout and "4.7.28" in shown.stdout
    as_json = json.loads(invoke(["status", "--sender", "--json"], env).stdout)
    assert as_json["hold"] is None and set(as_json["providers"]) == {"google"}
    registry = CollectorRegistry()
    registry.register(HoldCollector(holds.sender, providers=holds.provider_holds))
    left = {
        name: registry.get_sample_value("mailguard_provider_hold_seconds", {"provider": name})
        for name in ("google", "microsoft", "yahoo")
    }
    assert left["microsoft"] == 0.0 and left["yahoo"] == 0.0
    assert left["google"] is not None and 590.0 < left["google"] <= 600.0
