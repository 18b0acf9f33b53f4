"""Crash points inside a run: the worker (main process and pool) dies while a mail's first run
holds its claim, its slot, the SMTP conversation, or its recorded outcome.

Four mails to one recipient (``1/2s, 3/10s``): the first run of the first mail dies at the
point; the others wait in the queue. The dead worker's message comes back after the visibility
timeout (5 s), its claim lapses after the lease (3 s), and the clean worker finishes every
mail. A redelivered run sent on the slot its dead run took, next to the mails booked since,
would put four of them within 10 s."""

from __future__ import annotations

import pytest

from devservers.smtp_server import SmtpTestServer
from tests.reliability.crash.checker import Report
from tests.reliability.crash.harness import WINDOWED, CrashRun

pytestmark = [pytest.mark.server, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]

ADA = "ada@example.com"


def _killed_in_the_first_run(
    redis_url: str, smtp: SmtpTestServer, point: str, *, accept_then_drop: bool = False
) -> Report:
    with CrashRun(redis_url, smtp, WINDOWED) as run:
        doomed = run.doomed(point)
        run.send(*[(ADA, f"{point}-{n}") for n in range(4)])
        run.wait_dead(doomed)
        run.restart_clean()
        return run.check(accept_then_drop=accept_then_drop)


def test_killed_holding_the_claim(redis_url: str, smtp_server: SmtpTestServer) -> None:
    """``claimed``: the claim lapses after its lease; the mail is sent once, on time."""
    _killed_in_the_first_run(redis_url, smtp_server, "claimed")


def test_killed_admitted_before_the_transport(redis_url: str, smtp_server: SmtpTestServer) -> None:
    """``admitted``: the slot was taken, nothing sent; sent once, spaced from the others."""
    _killed_in_the_first_run(redis_url, smtp_server, "admitted")


def test_killed_inside_smtp_before_the_data(redis_url: str, smtp_server: SmtpTestServer) -> None:
    """``smtp-data``: recipients accepted, DATA not sent (the server keeps nothing); the
    redelivered first run is judged against the slot it was admitted for: sent once, spaced
    from the mails sent meanwhile, on time."""
    _killed_in_the_first_run(redis_url, smtp_server, "smtp-data")
    assert smtp_server.handler.data_commands == 4


def test_killed_after_the_server_accepted_the_data(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """``smtp-accepted``: the SMTP accept-then-drop window. The server has the mail; nothing
    recorded it, so its redelivered run sends it again once the claim lapsed: at most one
    extra copy, counted; every other promise holds."""
    report = _killed_in_the_first_run(
        redis_url, smtp_server, "smtp-accepted", accept_then_drop=True
    )
    assert report.extra_copies <= 1
    print(f"smtp-accepted: {report.extra_copies} copy sent twice (the accept-then-drop window)")


def test_killed_after_the_outcome_was_recorded(redis_url: str, smtp_server: SmtpTestServer) -> None:
    """``recorded``: sent and recorded, the result not stored nor the message acknowledged:
    the redelivered copy finds the recorded outcome and sends nothing."""
    _killed_in_the_first_run(redis_url, smtp_server, "recorded")
