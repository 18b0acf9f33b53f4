"""The decision's cost with a provider scope: the reference policy against the reference policy
plus ``provider: 2000/1h fixed; provider google: 50/1s gcra, 20000/1h fixed``, in the same
rounds.

A program, not a test (``make bench`` runs it through :mod:`benchmarks.table`; alone:
``python -m benchmarks.provider_scope``). Both contenders are :meth:`mailer.Limiter.acquire` on
one connection to one loopback redis-server, ``CALLS`` decisions per contender per round,
``ROUNDS`` rounds, the order swapped each round. The recipients are distinct and spread over
five domains of four providers (two Google domains, a Microsoft 365 tenant, Yahoo, a domain of
its own: :data:`DOMAINS`), found by the limiter's own :func:`mailer.providers.provider_finder`
on the same Redis, its MX answers from the suite's DNS server on loopback
(:class:`devservers.dns_server.DnsServer`, no internet). The finder is warmed before the clock
starts (each domain looked up once), so the hot path asks no DNS, which the program checks
against the DNS server's query log.

Each round gives each contender a fresh namespace (empty counts), so every round sees the
same thing: without the provider scope every decision admits; with it, Google's ``50/1s``
refuses most of Google's share once its second fills. Each decision is one script call (the
program checks it: no other command reached Redis, the finder's cache is in the process).
Figures per contender: the server's time per decision (the script call's ``INFO commandstats``
time, which includes the commands it runs, reset before each block), the client's time per
decision (round trip included), and the share admitted. Medians
over the rounds; a ratio is the median over the rounds of the ratio within the round.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import redis

from devservers.dns_server import DnsServer
from mailer import Limiter, Policy
from mailer.limits.policy import REFERENCE_POLICY
from mailer.providers import ProviderFinder, provider_finder
from mailer.providers.resolver import parse_servers

ROUNDS = 15
CALLS = 1_000
#: What is added to the reference policy (the tiers over 1 000 a window fixed, as a sliding
#: tier keeps at most 1 000 admissions; the per-second one gcra, as the policy docs write it).
PROVIDER_TIERS = "provider: 2000/1h fixed; provider google: 50/1s gcra, 20000/1h fixed"
WITHOUT = Policy.parse(REFERENCE_POLICY, name="recipient")
WITH = Policy.parse(f"recipient: {REFERENCE_POLICY}; {PROVIDER_TIERS}", name="recipient")
#: Recipient domains, their MX host and the provider the finder should find.
DOMAINS = (
    ("gmail.com", "gmail-smtp-in.l.google.com", "google"),
    ("workspace-customer.com", "aspmx.l.google.com", "google"),
    ("contoso.com", "contoso-com.mail.protection.outlook.com", "microsoft"),
    ("yahoo.com", "mta5.am0.yahoodns.net", "yahoo"),
    ("own-mail.net", "mx1.own-mail.net", "own-mail.net"),
)
CONTENDERS = ("without provider scope", "with provider scope")
#: The commands the decision scripts run (``INFO commandstats`` counts them apart too).
INSIDE_SCRIPTS = {
    f"cmdstat_{name}" for name in ("time", "get", "mget", "set", "incr", "pexpire", "exists")
}


@dataclass
class Figures:
    """Per contender, in each round: server µs, client µs per decision, admitted share."""

    server_us: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in CONTENDERS})
    client_us: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in CONTENDERS})
    admitted: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in CONTENDERS})

    def median(self, figure: dict[str, list[float]], contender: str) -> float:
        return statistics.median(figure[contender])

    def ratio(self, figure: dict[str, list[float]]) -> float:
        """With over without, the median over the rounds of the ratio within the round."""
        pairs = zip(figure[CONTENDERS[1]], figure[CONTENDERS[0]], strict=True)
        return statistics.median(w / wo for w, wo in pairs)

    def spread(self, figure: dict[str, list[float]]) -> tuple[float, float]:
        """The least and most of the rounds' ratios."""
        pairs = zip(figure[CONTENDERS[1]], figure[CONTENDERS[0]], strict=True)
        ratios = [w / wo for w, wo in pairs]
        return min(ratios), max(ratios)


def recipients(count: int, round_: int) -> list[str]:
    """``count`` distinct recipients, the domains taken in turn."""
    return [f"r{round_}-{n}@{DOMAINS[n % len(DOMAINS)][0]}" for n in range(count)]


def warmed_finder(url: str, dns: DnsServer) -> ProviderFinder:
    """The limiter's finder on ``url``'s Redis, each domain looked up once (through ``dns``)
    and checked to be the expected provider."""
    finder = provider_finder(url, servers=parse_servers(dns.servers), secret="bench")
    for domain, _, expected in DOMAINS:
        found = finder.provider_of(domain).name
        if found != expected:
            raise SystemExit(f"the finder found {found!r} for {domain}, not {expected!r}")
    return finder


def _block(client: redis.Redis, limiter: Limiter, batch: list[str]) -> tuple[float, float, float]:
    """The decisions of ``batch``: (server µs, client µs per decision, share admitted)."""
    client.config_resetstat()
    clock = time.perf_counter
    admitted = 0
    start = clock()
    for recipient in batch:
        admitted += limiter.acquire(recipient).allowed
    seconds = clock() - start
    stats = client.info("commandstats")
    scripts = [stats[n] for n in ("cmdstat_evalsha", "cmdstat_fcall") if n in stats]
    others = set(stats) - {"cmdstat_evalsha", "cmdstat_fcall", "cmdstat_config|resetstat"}
    if sum(int(s["calls"]) for s in scripts) != len(batch) or others - INSIDE_SCRIPTS:
        raise SystemExit(f"not one script call per decision: {sorted(stats)}")
    used = sum(float(s["usec"]) for s in scripts)  # the commands a script runs included
    return used / len(batch), seconds * 1e6 / len(batch), admitted / len(batch)


def measure(url: str) -> Figures:
    """Both contenders, ``ROUNDS`` rounds of ``CALLS`` decisions, alternating; a DNS server of
    its own for the warm-up, whose log proves the hot path asked it nothing."""
    figures = Figures()
    rounds, calls = ROUNDS, CALLS
    client = redis.Redis.from_url(url)
    with DnsServer([(domain, mx, 10) for domain, mx, _ in DOMAINS], ttl=3600) as dns:
        finder = warmed_finder(url, dns)
        asked = sum(dns.queries(domain) for domain, _, _ in DOMAINS)
        policies = dict(zip(CONTENDERS, (WITHOUT, WITH), strict=True))
        for round_ in range(-1, rounds):  # round -1: the warm-up, not timed
            batch = recipients(calls, round_)
            order = CONTENDERS if round_ % 2 == 0 else CONTENDERS[::-1]
            for contender in order:
                limiter = Limiter.from_url(
                    url,
                    policies[contender],
                    secret="bench",
                    namespace=f"bench-{CONTENDERS.index(contender)}-{round_}",
                    providers=finder,
                )
                try:
                    if round_ < 0:  # the scripts loaded
                        limiter.acquire("warm@own-mail.net")
                        continue
                    limiter.client.ping()  # its connection open before the clock starts
                    server, client_us, admitted = _block(client, limiter, batch)
                finally:
                    limiter.close()
                figures.server_us[contender].append(server)
                figures.client_us[contender].append(client_us)
                figures.admitted[contender].append(admitted)
        if sum(dns.queries(domain) for domain, _, _ in DOMAINS) != asked:
            raise SystemExit("the decisions asked the DNS: the finder's cache was not warm")
    client.close()
    return figures


def print_figures(figures: Figures) -> None:
    print(f"{'contender':<24} {'server us':>10} {'client us':>10} {'admitted':>9}")
    for contender in CONTENDERS:
        print(
            f"{contender:<24} {figures.median(figures.server_us, contender):>10.2f} "
            f"{figures.median(figures.client_us, contender):>10.1f} "
            f"{figures.median(figures.admitted, contender):>9.0%}"
        )
    for label, figure in (("server", figures.server_us), ("client", figures.client_us)):
        low, high = figures.spread(figure)
        print(f"{label} time, with / without: {figures.ratio(figure):.2f} ({low:.2f}-{high:.2f})")


if __name__ == "__main__":
    from benchmarks.limiter import _machine
    from devservers.redis_servers import RedisServer

    server = RedisServer().start()
    try:
        print(f"{_machine()}; {ROUNDS} rounds of {CALLS:,} decisions; + {PROVIDER_TIERS}")
        print_figures(measure(server.url))
    finally:
        server.cleanup()
