"""Greylisting by a real postgrey behind a real Postfix: its ``450 4.2.0 ... Greylisted`` reply
is read as greylisting, each mail is tried again after ``MAILGUARD_GREYLIST_DELAY`` and arrives
once, past postgrey's window (``--delay``), with postgrey's ``X-Greylist`` header."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from devservers.postfix import PostfixRelay
from tests.relay.conftest import GREYLIST_SECONDS
from tests.relay.stack import RelayStack, message_ids, parsed, relay_stack
from tests.waiting import poll

pytestmark = [pytest.mark.server, pytest.mark.slow]

#: mailguard's wait after a greylisting reply that states no delay, in seconds: past postgrey's.
RETRY_AFTER = GREYLIST_SECONDS + 1


@pytest.fixture(scope="module")
def greylisted_stack(greylisting_relay: PostfixRelay) -> Iterator[RelayStack]:
    with relay_stack(
        greylisting_relay, MAILGUARD_GREYLIST_DELAY=f"{RETRY_AFTER}s", MAILGUARD_SMTP_ATTEMPTS="1"
    ) as stack:
        yield stack


def _decisions(relay: PostfixRelay, address: str) -> list[str]:
    """postgrey's decisions about ``address``, in order (``greylist``, ``pass``)."""
    assert relay.postgrey is not None
    line = rf"action=(\w+),.* recipient={re.escape(address)}$"
    return re.findall(line, relay.postgrey.log(), re.MULTILINE)


def test_greylisted_mails_arrive_once_after_the_window(greylisted_stack: RelayStack) -> None:
    """Two mails, each greylisted on its first RCPT: both ``sent`` after one retry, at least
    postgrey's delay after they were refused, each once in its Maildir with the header
    postgrey had Postfix add (``X-Greylist: delayed N seconds``, N >= the delay)."""
    relay = greylisted_stack.relay
    users = ["u2", "u3"]
    results = [greylisted_stack.send(relay.address(user)) for user in users]
    outcomes = greylisted_stack.settled(results, timeout=40)
    assert [o["status"] for o in outcomes] == ["sent", "sent"], outcomes
    for user, outcome in zip(users, outcomes, strict=True):
        assert _decisions(relay, relay.address(user)) == ["greylist", "pass"]
        poll(lambda u=user: relay.maildir(u), 15, f"{user}'s mail to arrive")  # type: ignore[misc]
        assert message_ids(relay, user) == [outcome["message_id"]]
        header = str(parsed(relay.maildir(user)[0])["X-Greylist"])
        delayed = re.match(r"delayed (\d+) seconds by postgrey", header)
        assert delayed and int(delayed[1]) >= GREYLIST_SECONDS, header
    greylisted = relay.logged("Recipient address rejected: Greylisted", 2)
    assert greylisted == 2, "one refusal per mail: the retry waited for the window"
    assert "hold started" not in greylisted_stack.worker.log(), "greylisting holds nobody"
