"""The sender's pace against a real Postfix's anvil limit (``smtpd_client_message_rate_limit``):
a burst of ``BURST`` mails to distinct recipients, anvil taking ``LIMIT`` per ``UNIT``
seconds. After the first refusal the pace learns the count the relay took per window and sends
at most that many per window: each mail arrives once, and in every anvil window after the first
Postfix refuses at most ``MAX_REFUSED``. The refusals are counted from Postfix's own log.

The same burst against anvil's connection limit (``smtpd_client_connection_rate_limit``):
with SMTP sessions reused the limit does not bite (two connections for thirty mails); with one
session per mail the pace learns it the same way.

``UNIT`` is 5 s (Postfix's default ``anvil_rate_time_unit`` is 60 s) so that the burst takes
about 40 s; ``MAILGUARD_PACE_WINDOW`` names the same window."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devservers.postfix import PostfixRelay
from tests.relay.stack import RelayStack, message_ids, relay_stack
from tests.waiting import poll

pytestmark = [pytest.mark.server, pytest.mark.slow]

BURST = 30
LIMIT = 5
UNIT = 5
MAX_REFUSED = 2
USERS = tuple(f"p{n}" for n in range(BURST))
#: What Postfix logs for each MAIL FROM anvil refuses, and for each it accepts (a queue file).
REFUSED = "Message delivery request rate limit exceeded"
ACCEPTED = ": client="


@pytest.fixture(scope="module")
def pace_relay() -> Iterator[PostfixRelay]:
    with PostfixRelay(USERS, message_rate_limit=LIMIT, rate_time_unit=f"{UNIT}s") as relay:
        yield relay


@pytest.fixture(scope="module")
def pace_stack(pace_relay: PostfixRelay) -> Iterator[RelayStack]:
    with relay_stack(
        pace_relay,
        MAILGUARD_RETRY_BACKOFF="1s",
        MAILGUARD_SMTP_ATTEMPTS="1",
        MAILGUARD_PACE_WINDOW=f"{UNIT}s",
    ) as stack:
        yield stack


def refusal_runs(log: str, refused: str = REFUSED) -> list[int]:
    """The refusals in ``log`` (lines with ``refused``), as the lengths of the runs between
    accepted mails.

    anvil refuses a client only once its window is full and opens the next window with an
    accepted request, so each run of refusals lies in one window (a window without refusals
    has no run)."""
    runs: list[int] = []
    run = 0
    for line in log.splitlines():
        if refused in line:
            run += 1
        elif ACCEPTED in line and run:
            runs.append(run)
            run = 0
    return [*runs, run] if run else runs


def timeline(log: str) -> str:
    """``log``'s accepted (``+``) and refused (``-``) MAIL FROMs by second, for the eye."""
    marks = [
        (line[7:15], "+" if ACCEPTED in line else "-")
        for line in log.splitlines()
        if ACCEPTED in line or REFUSED in line
    ]
    return " ".join(f"{second}{mark}" for second, mark in marks)


def test_runs_of_refusals() -> None:
    log = "\n".join(["a" + ACCEPTED] * 5 + [REFUSED] * 3 + ["b" + ACCEPTED, REFUSED])
    assert refusal_runs(log) == [3, 1]


def test_a_burst_is_paced_to_anvils_window(pace_stack: RelayStack) -> None:
    """Thirty mails at once, Postfix taking five per 5 s: each mail ``sent`` and in its Maildir
    once; after the first window at most two refusals per window."""
    relay = pace_stack.relay
    results = [pace_stack.send(relay.address(user)) for user in USERS]
    outcomes = pace_stack.settled(results, timeout=150)
    assert [o["status"] for o in outcomes] == ["sent"] * BURST, outcomes
    for user, outcome in zip(USERS, outcomes, strict=True):
        poll(lambda u=user: relay.maildir(u), 15, f"{user}'s mail to arrive")  # type: ignore[misc]
        assert message_ids(relay, user) == [outcome["message_id"]]
    relay.logged(ACCEPTED, BURST)
    runs = refusal_runs(relay.log())
    print(f"refusals per anvil window: {runs} (total {sum(runs)})")
    print(timeline(relay.log()))
    assert runs, relay.log()[-2000:]
    assert all(run <= MAX_REFUSED for run in runs[1:]), runs


#: What Postfix logs for each connection anvil refuses.
REFUSED_CONNECTION = "Connection rate limit exceeded"


@pytest.fixture(params=["100", "1"], ids=["reused", "one-per-mail"])
def connection_stack(request: pytest.FixtureRequest) -> Iterator[RelayStack]:
    """A stack on a relay of its own (anvil's counts start afresh) with SMTP sessions of up to
    ``request.param`` mails."""
    relay = PostfixRelay(USERS, connection_rate_limit=LIMIT, rate_time_unit=f"{UNIT}s")
    with (
        relay,
        relay_stack(
            relay,
            MAILGUARD_SMTP_SESSION_MAILS=request.param,
            MAILGUARD_RETRY_BACKOFF="1s",
            MAILGUARD_SMTP_ATTEMPTS="1",
            MAILGUARD_PACE_WINDOW=f"{UNIT}s",
        ) as stack,
    ):
        yield stack


def test_a_burst_under_anvils_connection_limit_arrives_once(connection_stack: RelayStack) -> None:
    """Thirty mails at once, Postfix taking five connections per 5 s: with one SMTP session
    carrying several mails (``MAILGUARD_SMTP_SESSION_MAILS``) each mail is ``sent`` and in its
    Maildir once; after the first window Postfix refuses at most two connections per window
    (with sessions reused, none at all)."""
    relay = connection_stack.relay
    results = [connection_stack.send(relay.address(user)) for user in USERS]
    outcomes = connection_stack.settled(results, timeout=150)
    assert [o["status"] for o in outcomes] == ["sent"] * BURST, outcomes
    for user, outcome in zip(USERS, outcomes, strict=True):
        poll(lambda u=user: relay.maildir(u), 15, f"{user}'s mail to arrive")  # type: ignore[misc]
        assert message_ids(relay, user) == [outcome["message_id"]]
    log = relay.log()
    connections = sum(1 for line in log.splitlines() if "]: connect from" in line)
    runs = refusal_runs(log, REFUSED_CONNECTION)
    print(f"connections {connections}, refused per anvil window: {runs} (total {sum(runs)})")
    assert all(run <= MAX_REFUSED for run in runs[1:]), runs
