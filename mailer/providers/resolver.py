"""A domain's MX hosts from DNS (dnspython), answered within a bound or refused as a failure.

:class:`MxResolver` asks the servers of ``MAILGUARD_DNS_SERVERS`` (``ip[:port]``, comma
separated; none: the system's resolver, ``/etc/resolv.conf``) and gives up after ``lifetime``
seconds in all (every server and retry included). Its answers:

- MX records: the hosts by preference (lowest first, then by name), with the answer's TTL;
- no MX record (NXDOMAIN, or the name exists without MX): the domain itself, its implicit MX
  (RFC 5321 section 5.1), with the negative answer's TTL (the SOA minimum when the server sends
  one, else ``None``); a null MX (``0 .``, RFC 7505) is the domain itself too;
- anything else (a timeout, SERVFAIL, REFUSED, no server reachable) raises
  :class:`LookupFailed`: the caller decides what a failure means.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import dns.exception
import dns.name
import dns.nameserver
import dns.rdatatype
import dns.resolver

#: The default bound on one lookup, in seconds (every server and retry included).
LIFETIME = 2.0


class LookupFailed(Exception):
    """The DNS gave no usable answer in time (timeout, SERVFAIL, REFUSED, unreachable)."""


@dataclass(frozen=True)
class MxAnswer:
    """A domain's MX hosts, most preferred first; ``ttl`` in seconds (None: the server gave
    none); ``implicit``: the domain has no MX, ``hosts`` is the domain itself."""

    hosts: tuple[str, ...]
    ttl: float | None
    implicit: bool = False


class Resolver(Protocol):
    """What :class:`~mailer.providers.finder.ProviderFinder` asks: one domain's MX hosts."""

    def mx(self, domain: str) -> MxAnswer:
        """The MX answer for ``domain`` (normalised), or :class:`LookupFailed`."""
        ...


def parse_servers(text: str) -> tuple[tuple[str, int], ...]:
    """``ip[:port]`` items, comma separated (IPv6 as ``[ip]:port``), as ``(ip, port)`` pairs,
    port 53 when none is given; ``""``: no servers (the system's). ``ValueError`` saying which
    item is bad."""
    servers: list[tuple[str, int]] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        host, port = item, "53"
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else "53"
        elif item.count(":") == 1:
            host, port = item.split(":")
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"DNS server {item!r} is not ip[:port] (an IP address)") from None
        if not port.isdigit() or not 0 < int(port) < 65_536:
            raise ValueError(f"DNS server {item!r} is not ip[:port] (a port 1-65535)")
        servers.append((host, int(port)))
    return tuple(servers)


def _negative_ttl(exc: dns.resolver.NXDOMAIN | dns.resolver.NoAnswer) -> float | None:
    """The SOA minimum of a negative answer's authority section (RFC 2308), None without."""
    if isinstance(exc, dns.resolver.NoAnswer):
        response = exc.response()  # type: ignore[no-untyped-call]
    else:
        responses = list(exc.responses().values())  # type: ignore[no-untyped-call]
        response = responses[0] if responses else None
    if response is None:
        return None
    for rrset in response.authority:
        if rrset.rdtype == dns.rdatatype.SOA:
            return float(min(rrset.ttl, rrset[0].minimum))
    return None


class MxResolver:
    """:class:`Resolver` on dnspython: ``servers`` as :func:`parse_servers` gives them (empty:
    the system's), every lookup bounded by ``lifetime`` seconds. Thread-safe (dnspython's
    resolver is; no cache of its own: the finder caches)."""

    def __init__(self, servers: Sequence[tuple[str, int]] = (), lifetime: float = LIFETIME):
        if lifetime <= 0:
            raise ValueError(f"DNS lifetime must be > 0 s, got {lifetime:g}")
        if servers:
            resolver = dns.resolver.Resolver(configure=False)
            resolver.nameservers = [dns.nameserver.Do53Nameserver(h, p) for h, p in servers]
        else:
            resolver = dns.resolver.Resolver()
        resolver.lifetime = lifetime
        resolver.timeout = lifetime
        self._resolver = resolver

    def mx(self, domain: str) -> MxAnswer:
        try:
            answer = self._resolver.resolve(domain, "MX", search=False)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer) as exc:
            return MxAnswer((domain,), _negative_ttl(exc), implicit=True)
        except dns.exception.DNSException as exc:  # timeout, SERVFAIL, REFUSED, no servers
            raise LookupFailed(f"MX of {domain}: {type(exc).__name__}") from exc
        records = sorted(answer, key=lambda mx: (mx.preference, str(mx.exchange)))
        hosts = tuple(
            str(mx.exchange).rstrip(".").lower() for mx in records if mx.exchange != dns.name.root
        )
        ttl = float(answer.rrset.ttl) if answer.rrset is not None else None
        if not hosts:  # a null MX: the domain accepts no mail; it is its own provider
            return MxAnswer((domain,), ttl, implicit=True)
        return MxAnswer(hosts, ttl)
