"""SMTP connection reuse benchmark: mails per second through a STARTTLS + AUTH relay with one
session carrying many mails (``MAILGUARD_SMTP_SESSION_MAILS``, default 100) against one
session per mail (``SESSION_MAILS=1``: a TCP connect, EHLO, STARTTLS, EHLO, AUTH and QUIT for
each mail, as a plain Celery task that opens its own connection does). A program, not a test
(``make bench``).

The relay is an aiosmtpd server on loopback started here (STARTTLS with a self-signed
certificate made by ``openssl``, AUTH PLAIN/LOGIN), in this process's threads; or, with
``--relay smtp+starttls://user:password@127.0.0.1:PORT`` and ``--ca-file`` (or
``--no-verify``), a relay of one's own (then the mails are counted by the sender only); or, with
``--postfix``, a real Postfix on loopback started here (:class:`devservers.postfix.PostfixRelay`:
STARTTLS with a throwaway certificate, SMTP AUTH through cyrus sasldb, a mailbox per recipient;
needs root and Debian's postfix and sasl2-bin), whose Maildirs are checked to hold each mail
once and whose log counts the connections (its queue and Maildirs under ``TMPDIR``: Postfix
syncs each mail to disk there before it replies, a cost reuse does not save). Rounds of
``--mails`` mails (default 300) alternate between the two ways, ``--rounds`` each (default 5),
so both meet the same load; one mail at a time (``--senders N``: N threads at once, each with its
own session, as the pool processes of a worker), each to its own recipient, the envelopes built
before the clock starts. For each way: the median mails per second and the connections the
server counted; then reuse / per mail, the median of the rounds' ratios and round by round.
Target: reuse at least 3x. ``python -m benchmarks.table`` (``make bench``) measures the Postfix
way, 300 mails and 5 rounds, as a row of its table.

One sender is the default: a pool process sends one mail at a time, and the figure is then
what reuse saves one process. ``--senders N`` runs N threads of this one process (N
sessions at once, as N pool processes hold N): their Python shares one interpreter lock,
which a worker's processes do not, so on a small machine it measures the client's own
contention as much as reuse.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from pathlib import Path

from benchmarks.limiter import _machine
from devservers.postfix import PostfixRelay
from devservers.smtp_server import SmtpTestServer, TestCertificate
from mailer.mail.envelope import Envelope, envelope_of
from mailer.mail.message import Mail
from mailer.mail.transports.smtp import SmtpTransport
from mailer.mail.transports.smtp_tls import TlsOptions, client_context

#: The two ways measured: their label and the mails one session carries.
WAYS = (("per mail", 1), ("reuse", 100))
#: The target: reuse's mails per second over one session per mail's.
TARGET = 3.0
USER, PASSWORD = "bench", "bench-secret"
#: The mails of the warm-up round (one session per mail), before the clock starts.
WARM = 20


@dataclass
class Figures:
    """Each way's mails per second and server-counted connections per round (None: a relay of
    one's own, which is not counted here)."""

    rates: dict[str, list[float]] = field(default_factory=lambda: {w: [] for w, _ in WAYS})
    connections: dict[str, list[int | None]] = field(
        default_factory=lambda: {w: [] for w, _ in WAYS}
    )

    def median(self, way: str) -> float:
        return statistics.median(self.rates[way])

    @property
    def ratio(self) -> float:
        """Reuse / per mail: the median over the rounds of the ratio within the round (the two
        ways of a round run one after the other: slow drifts in the machine's load cancel)."""
        return statistics.median(self.paired)

    @property
    def paired(self) -> list[float]:
        """Reuse / per mail, round by round (adjacent in time)."""
        return [r / p for r, p in zip(self.rates["reuse"], self.rates["per mail"], strict=True)]


@dataclass(frozen=True)
class Relay:
    """Where the mails go: the URL and the TLS options the transport uses."""

    url: str
    tls: TlsOptions
    server: SmtpTestServer | None = None  # the aiosmtpd relay started here, counting


def envelopes(count: int, round_: int, way: str) -> list[Envelope]:
    """``count`` mails, each to its own recipient, built before the clock starts."""
    tag = way.replace(" ", "-")
    return [
        envelope_of(
            Mail(
                to=f"r{n}@example.com",
                subject=f"Bench {round_} {tag} {n}",
                body="Your code is 482913\n",
                mail_id=f"bench-{round_}-{tag}-{n}",
                sender="bench@sender.example",
            )
        )
        for n in range(count)
    ]


def one_round(  # noqa: PLR0917 (the round's parameters, each named at its call)
    relay: Relay, mails: int, round_: int, way: str, session_mails: int, senders: int = 1
) -> float:
    """Mails per second of one round of ``way`` sent by ``senders`` threads sharing one
    transport (each thread has its own session, as each pool process of a worker has); the
    server (if ours) got each mail once (in order with one sender)."""
    transport = SmtpTransport.from_url(
        relay.url, ssl_context=client_context(relay.tls), session_mails=session_mails
    )
    batch = envelopes(mails, round_, way)
    before = len(relay.server.delivered) if relay.server is not None else 0

    def send(share: list[Envelope]) -> None:
        for item in share:
            transport.send(item)

    started = time.perf_counter()
    if senders == 1:
        send(batch)
    else:
        with ThreadPoolExecutor(senders) as pool:
            list(pool.map(send, [batch[n::senders] for n in range(senders)]))
    transport.close()  # the last QUIT is part of the way's cost
    elapsed = time.perf_counter() - started
    if relay.server is not None:
        got = [str(d.message["Subject"]) for d in relay.server.delivered[before:]]
        expected = [str(e.message["Subject"]) for e in batch]
        if senders > 1:
            got, expected = sorted(got), sorted(expected)
        if got != expected:
            raise SystemExit(f"the relay did not get each mail of {way} once")
    return mails / elapsed


def measure(
    mails: int = 300,
    rounds: int = 5,
    relay: Relay | None = None,
    session_mails: int = 100,
    senders: int = 1,
) -> Figures:
    """Both ways, ``rounds`` rounds each, alternating, by ``senders`` threads; against an
    aiosmtpd STARTTLS + AUTH relay started here unless ``relay`` is given."""
    figures = Figures()
    with tempfile.TemporaryDirectory(prefix="smtp-reuse-") as directory:
        server = None
        if relay is None:
            cert = TestCertificate.create(Path(directory))
            server = SmtpTestServer((USER, PASSWORD), tls="starttls", cert=cert).start()
            relay = Relay(
                f"smtp+starttls://{USER}:{PASSWORD}@127.0.0.1:{server.port}",
                TlsOptions(ca_file=str(cert.cert)),
                server,
            )
        try:
            one_round(relay, WARM, -1, "per mail", 1)  # warm: imports, the first handshake
            for round_ in range(rounds):
                for way, carried in WAYS:
                    opened = server.connections if server is not None else 0
                    per_session = carried if carried == 1 else session_mails
                    rate = one_round(relay, mails, round_, way, per_session, senders)
                    figures.rates[way].append(rate)
                    count = server.connections - opened if server is not None else None
                    figures.connections[way].append(count)
        finally:
            if server is not None:
                server.stop()
    return figures


@contextmanager
def postfix_relay(mails: int) -> Iterator[tuple[Relay, PostfixRelay]]:
    """A Postfix of its own on loopback (STARTTLS with a throwaway certificate, AUTH as
    ``USER``), a mailbox for each of the ``mails`` recipients (``r0`` ...), and the
    :class:`Relay` that sends to it verifying that certificate; removed on exit."""
    with tempfile.TemporaryDirectory(prefix="smtp-reuse-postfix-") as directory:
        cert = TestCertificate.create(Path(directory))
        users = [f"r{n}" for n in range(max(mails, WARM))]
        with PostfixRelay(users, cert=cert, logins={USER: PASSWORD}) as postfix:
            url = f"smtp+starttls://{USER}:{PASSWORD}@127.0.0.1:{postfix.port}"
            yield Relay(url, TlsOptions(ca_file=str(cert.cert))), postfix


def postfix_received(postfix: PostfixRelay, mails: int, rounds: int, timeout: float = 60) -> int:
    """Check that ``postfix``'s Maildirs hold each mail of the run once (the warm-up round and
    ``rounds`` rounds of each way, by Subject), waiting up to ``timeout`` s for its queue to
    drain; the SMTP connections its log counted."""
    expected = {
        str(e.message["Subject"])
        for round_, way, count in [(-1, "per mail", WARM)]
        + [(r, w, mails) for r in range(rounds) for w, _ in WAYS]
        for e in envelopes(count, round_, way)
    }
    deadline = time.monotonic() + timeout
    while postfix.queued() and time.monotonic() < deadline:
        time.sleep(0.2)
    subjects = [
        str(message_from_bytes(raw)["Subject"])
        for messages in postfix.delivered().values()
        for raw in messages
    ]
    if len(subjects) != len(expected) or set(subjects) != expected:
        raise SystemExit(
            f"Postfix's Maildirs do not hold each mail once: {len(subjects)} messages, "
            f"{len(set(subjects))} distinct, {len(expected)} sent"
        )
    return postfix.log_count("disconnect from")


def print_figures(figures: Figures, mails: int) -> None:
    print(f"\n{'way':<10} {'mails/s':>9} {'connections a round':>20} {'mails a connection':>19}")
    for way, _ in WAYS:
        counted = [c for c in figures.connections[way] if c is not None]
        connections = statistics.median(counted) if counted else None
        shown = "not counted" if connections is None else f"{connections:,.0f}"
        per = "" if not connections else f"{mails / connections:,.1f}"
        print(f"{way:<10} {figures.median(way):>9,.0f} {shown:>20} {per:>19}")
    met = "yes" if figures.ratio >= TARGET else "no"
    print(
        f"\nreuse / per mail: {figures.ratio:.2f}x, the median of the rounds' ratios (target >= "
        f"{TARGET:g}x: {met}); round by round {', '.join(f'{r:.2f}' for r in figures.paired)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mails", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--session-mails", type=int, default=100)
    parser.add_argument(
        "--relay", help="smtp+starttls://user:password@127.0.0.1:PORT (default: aiosmtpd here)"
    )
    parser.add_argument("--ca-file", help="the relay's CA (PEM), with --relay")
    parser.add_argument("--no-verify", action="store_true", help="with --relay: verify=off")
    parser.add_argument(
        "--postfix",
        action="store_true",
        help="start a STARTTLS + AUTH Postfix on loopback here and send through it (root)",
    )
    parser.add_argument(
        "--senders",
        type=int,
        default=1,
        help="threads sending at once, each with its own session (a worker's pool processes)",
    )
    args = parser.parse_args()
    logging.getLogger("mail.log").setLevel(logging.ERROR)  # aiosmtpd's deprecation notes
    if args.postfix:
        run_postfix(args.mails, args.rounds, args.session_mails, args.senders)
        return
    relay = None
    if args.relay:
        relay = Relay(args.relay, TlsOptions(ca_file=args.ca_file, verify=not args.no_verify))
    where = "aiosmtpd STARTTLS + AUTH on loopback" if relay is None else "the given relay"
    _headline(args.mails, args.rounds, where)
    figures = measure(args.mails, args.rounds, relay, args.session_mails, args.senders)
    print_figures(figures, args.mails)


def collect_postfix(
    mails: int = 300, rounds: int = 5, session_mails: int = 100, senders: int = 1, *, quiet: bool
) -> tuple[Figures, int]:
    """The benchmark through a Postfix started here (:func:`postfix_relay`), its Maildirs
    checked (:func:`postfix_received`): the figures and the connections Postfix's log counted.
    Unless ``quiet``, the headline is printed first."""
    with postfix_relay(mails) as (relay, postfix):
        if not quiet:
            _headline(mails, rounds, f"Postfix STARTTLS + AUTH on 127.0.0.1:{postfix.port}")
        figures = measure(mails, rounds, relay, session_mails, senders)
        return figures, postfix_received(postfix, mails, rounds)


def run_postfix(mails: int, rounds: int, session_mails: int, senders: int = 1) -> Figures:
    """:func:`collect_postfix`, the figures printed."""
    figures, connections = collect_postfix(mails, rounds, session_mails, senders, quiet=False)
    print_figures(figures, mails)
    print(
        f"Postfix's Maildirs hold each of the {WARM + 2 * rounds * mails:,} mails once; "
        f"its log counted {connections:,} SMTP connections"
    )
    return figures


def _headline(mails: int, rounds: int, where: str) -> None:
    print(
        f"SMTP reuse benchmark: {mails:,} mails a round, {rounds} rounds, through {where}; "
        f"{_machine()}"
    )


if __name__ == "__main__":
    main()
