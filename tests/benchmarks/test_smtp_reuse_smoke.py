"""The SMTP reuse benchmark still runs (``python -m benchmarks.smtp_reuse``) at toy sizes: both
ways through its own STARTTLS + AUTH aiosmtpd relay, through a relay given by URL (the
``--relay`` path) and through a Postfix it starts itself (``--postfix``). Nothing here is
timed: the figures of a toy run mean nothing; the connections the server counted and each mail
arriving once (which the program checks itself) must hold."""

from __future__ import annotations

import math

import pytest

from benchmarks import smtp_reuse
from devservers.smtp_server import SmtpTestServer, TestCertificate
from mailer.mail.transports.smtp_tls import TlsOptions

pytestmark = [pytest.mark.server]


def test_both_ways_through_its_own_relay() -> None:
    """Per mail: a connection per mail; reuse: one connection for the round."""
    figures = smtp_reuse.measure(mails=8, rounds=2)
    for way, _ in smtp_reuse.WAYS:
        assert len(figures.rates[way]) == 2
        assert all(math.isfinite(rate) and rate > 0 for rate in figures.rates[way])
    assert figures.connections["per mail"] == [8, 8]
    assert figures.connections["reuse"] == [1, 1]
    assert math.isfinite(figures.ratio)
    smtp_reuse.print_figures(figures, 8)


def test_a_relay_given_by_url(test_certificate: TestCertificate) -> None:
    """``--relay`` with ``--ca-file``: the mails go there (not counted by the benchmark)."""
    with SmtpTestServer(("u", "p"), tls="starttls", cert=test_certificate) as server:
        relay = smtp_reuse.Relay(
            f"smtp+starttls://u:p@127.0.0.1:{server.port}",
            TlsOptions(ca_file=str(test_certificate.cert)),
        )
        figures = smtp_reuse.measure(mails=5, rounds=1, relay=relay, session_mails=3)
        assert figures.connections == {"per mail": [None], "reuse": [None]}
        assert len(server.delivered) == 20 + 5 + 5  # the warm-up round, then each way
        assert server.connections == 20 + 5 + 2  # reuse: 3 + 2 mails


def test_through_a_postfix_it_starts(capsys: pytest.CaptureFixture[str]) -> None:
    """``--postfix``: a STARTTLS + AUTH Postfix of its own; its Maildirs hold each mail once
    (checked by the program) and its log counted the warm-up's, each per-mail and the reuse
    sessions (3 + 2 mails)."""
    figures = smtp_reuse.run_postfix(mails=5, rounds=1, session_mails=3)
    assert all(len(figures.rates[way]) == 1 for way, _ in smtp_reuse.WAYS)
    shown = capsys.readouterr().out
    assert f"hold each of the {smtp_reuse.WARM + 10} mails once" in shown, shown
    assert f"counted {smtp_reuse.WARM + 5 + 2} SMTP connections" in shown, shown
