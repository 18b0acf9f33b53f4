"""The guard under a policy with provider tiers, built from settings as the workers build it:
each mail counted under its recipient domain's provider, found from the test DNS."""

from __future__ import annotations

import pytest

from devservers.dns_server import DnsServer
from mailer import Kinds, Limiter
from mailer.factory import build_limiter, memory_guard
from mailer.guard import Guard, Later, MailRequest
from mailer.mail.transports import MemoryTransport
from mailer.records.ledger import MemoryLedger
from mailer.settings import Settings


def _settings(dns_server: DnsServer, policy: str, url: str = "memory://") -> Settings:
    return Settings.from_env(
        {
            "MAILGUARD_LIMITER_URL": url,
            "MAILGUARD_SECRET": "a test secret of at least thirty-two characters",
            "MAILGUARD_POLICY": policy,
            "MAILGUARD_DNS_SERVERS": dns_server.servers,
            "MAILGUARD_DNS_TIMEOUT": "500ms",
            "MAILGUARD_ALLOW_RESERVED_DOMAINS": "test",  # the test DNS's Workspace domains
        }
    )


def _guard(limiter: Limiter, settings: Settings) -> Guard:
    clock = limiter.now
    return memory_guard(
        limiter,
        MemoryLedger(clock),
        MemoryTransport(),
        kinds=Kinds.defaults(),
        config=settings.guard_config(),
        clock=clock,
    )


def _mail(mail_id: str, to: str) -> MailRequest:
    return MailRequest(to=to, mail_id=mail_id, subject="Hi", body="x")


def test_the_guard_books_a_providers_third_mail_and_sends_the_others(
    dns_server: DnsServer, backend_url: str
) -> None:
    """provider google: 2/1m from settings (memory, and Redis: the finder on the limiter's
    client; a minute, as the Redis limiter runs on the server's clock): two Workspace mails
    go, the third is booked by ``provider google 2/1m``; Outlook's and Yahoo's go at once;
    Microsoft's second waits on ``provider 1/1m``."""
    settings = _settings(dns_server, "provider google: 2/1m; provider: 1/1m", backend_url)
    limiter = build_limiter(settings)
    assert limiter.providers is not None
    guard = _guard(limiter, settings)
    steps = [
        guard.process(_mail(f"g{i}", f"u{i}@{d}"))
        for i, d in enumerate(("shop.test", "new.test", "backup.test"))
    ]
    assert [s.outcome.status for s in steps] == ["sent", "sent", "deferred"]
    assert isinstance(steps[2], Later)
    assert steps[2].outcome.tier == "provider google 2/1m"
    others = [
        guard.process(_mail(f"o{i}", f"v@{d}")) for i, d in enumerate(("outlook.com", "yahoo.com"))
    ]
    assert [s.outcome.status for s in others] == ["sent", "sent"]
    again = guard.process(_mail("o9", "w@contoso.test"))
    assert again.outcome.status == "deferred" and again.outcome.tier == "provider 1/1m"


@pytest.mark.parametrize("policy", ["recipient: 1/1s; domain: 5/1s", "1/60s"])
def test_a_policy_without_provider_tiers_builds_no_finder(
    dns_server: DnsServer, policy: str
) -> None:
    """No provider tiers: no finder, and no DNS asked for any mail."""
    settings = _settings(dns_server, policy)
    limiter = build_limiter(settings)
    assert limiter.providers is None
    guard = _guard(limiter, settings)
    assert guard.process(_mail("a", "a@corp.test")).outcome.status == "sent"
    assert dns_server.queries("corp.test") == 0
