"""``mailguard status`` and ``mailguard simulate`` under a policy with provider tiers: each
provider scope's tiers shown, providers found from the test DNS as the workers find them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from devservers.dns_server import DnsServer
from mailer import Limiter, Policy
from mailer.factory import build_providers
from mailer.settings import Settings
from tests.workers.cli.test_cli import invoke, one_line_error

POLICY = "recipient: 5/1m; sender: 100/1m; provider: 3/1m fixed; provider google: 2/1m gcra, 10/1h"


def _env(url: str, dns_server: DnsServer, secret: str, policy: str = POLICY) -> dict[str, str]:
    return {
        "MAILGUARD_LIMITER_URL": url,
        "MAILGUARD_POLICY": policy,
        "MAILGUARD_SECRET": secret,
        "MAILGUARD_DNS_SERVERS": dns_server.servers,
        "MAILGUARD_ALLOW_RESERVED_DOMAINS": "test",
    }


def test_status_shows_the_providers_scope_of_an_address_and_of_a_provider(
    redis_url: str, dns_server: DnsServer
) -> None:
    """status ADDRESS: its provider's scope among the others (Google's for a Workspace
    domain); --provider NAME alone: that provider's tiers (named, or every provider's)."""
    secret = os.urandom(8).hex()
    env = _env(redis_url, dns_server, secret)
    limiter = Limiter.from_url(redis_url, Policy.parse(POLICY, name="recipient"), secret=secret)
    limiter.providers = build_providers(Settings.from_env(env), limiter)
    for n, domain in enumerate(("shop.test", "gmail.com", "outlook.com")):
        assert limiter.acquire(f"u{n}@{domain}", mail_id=f"m{n}").allowed
    limiter.close()

    result = invoke(["status", "ada@googlemail.com", "--json"], env)
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert (status["allowed_now"], status["binding_tier"]) == (
        False,
        "provider google 2/1m gcra",
    ), status
    scopes = {
        s["scope"]: (s["subject"], [(t["tier"], t["used"]) for t in s["tiers"]])
        for s in status["scopes"]
    }
    assert scopes["provider google"] == ("google", [("2/1m gcra", 2), ("10/1h", 2)])
    assert "provider" not in scopes, "a named provider is counted in its own scope only"
    table = invoke(["status", "--provider", "Microsoft"], env)
    assert table.exit_code == 0, table.output
    assert re.search(r"provider\s+microsoft\s+3/1m fixed\s+1 / 3\s+2", table.stdout)
    google = json.loads(invoke(["status", "--provider", "google", "--json"], env).stdout)
    assert [s["scope"] for s in google["scopes"]] == ["provider google"]
    plain = invoke(
        ["status", "--provider", "google"], _env(redis_url, dns_server, secret, "sender: 1/1s")
    )
    assert plain.exit_code == 2
    assert "has no provider tiers" in one_line_error(plain.stderr)


def test_simulate_shows_provider_tiers_and_finds_providers_with_dns(
    tmp_path: Path, dns_server: DnsServer
) -> None:
    """simulate: the provider scopes' tiers are rows of the report; with --dns a provider
    google tier binds Google's domains together, without it each domain is its own."""
    trace = tmp_path / "trace.csv"
    domains = ["gmail.com"] * 4 + ["yahoo.com", "aol.com"] * 2  # Google's, and Yahoo's two
    trace.write_text("".join(f"0,u{n}@{d}\n" for n, d in enumerate(domains)))
    env = _env("memory://", dns_server, "s")
    args = ["simulate", "--csv", str(trace), "--policy", "provider google: 2/1m; provider: 1/1h"]
    with_dns = invoke([*args, "--dns"], env)
    assert with_dns.exit_code == 0, with_dns.output
    assert re.search(r"provider google 2/1m\s+2\b", with_dns.stdout), with_dns.stdout
    assert re.search(r"provider 1/1h\s+3\b", with_dns.stdout), "yahoo.com and aol.com: Yahoo"
    without = invoke(args, env)
    assert without.exit_code == 0, without.output
    assert re.search(r"provider 1/1h\s+5\b", without.stdout), without.stdout
    assert re.search(r"provider google 2/1m\s+0\b", without.stdout), "no domain is google"
