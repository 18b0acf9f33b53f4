"""Greylisting longer than the old retry budget, by a real postgrey behind a real Postfix:
postgrey's ``--delay`` (10 s) is more than ``MAILGUARD_SEND_RETRIES`` + 1 tries at
``MAILGUARD_GREYLIST_DELAY`` (1 s) cover (the fourth try is due at 5 s: 5 s to spare for runs
that come late on a loaded machine), yet the mail is kept (greylisting counts against no
budget) and arrives once, past the window. The waits are capped by ``RETRY_BACKOFF_MAX`` (2 s)
to keep the test short; the promise is the same at postgrey's default 300 s."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from devservers.postfix import PostfixRelay
from tests.relay.conftest import USERS
from tests.relay.stack import RelayStack, message_ids, parsed, relay_stack
from tests.waiting import poll

pytestmark = [pytest.mark.server, pytest.mark.slow]

#: postgrey's ``--delay``, in seconds: longer than the old budget's tries spanned.
WINDOW = 10
#: ``MAILGUARD_SEND_RETRIES``: the old code ended the mail failed after this many + 1 refusals.
SEND_RETRIES = 2


@pytest.fixture(scope="module")
def long_greylist_stack() -> Iterator[RelayStack]:
    with (
        PostfixRelay(USERS, greylist_delay=WINDOW) as relay,
        relay_stack(
            relay,
            MAILGUARD_GREYLIST_DELAY="1s",
            MAILGUARD_RETRY_BACKOFF_MAX="2s",
            MAILGUARD_SEND_RETRIES=str(SEND_RETRIES),
            MAILGUARD_SMTP_ATTEMPTS="1",
        ) as stack,
    ):
        yield stack


def test_a_mail_greylisted_past_the_old_budget_arrives_once(
    long_greylist_stack: RelayStack,
) -> None:
    """One mail refused by postgrey more than ``SEND_RETRIES`` + 1 times: ``sent``, never
    failed, once in its Maildir with postgrey's ``X-Greylist: delayed N seconds`` (N >= the
    window); postgrey decided ``greylist`` each time until ``pass``."""
    stack = long_greylist_stack
    relay = stack.relay
    address = relay.address("u4")
    [outcome] = stack.settled([stack.send(address)], timeout=45)
    assert outcome["status"] == "sent", outcome
    assert relay.postgrey is not None
    line = rf"action=(\w+),.* recipient={re.escape(address)}$"
    decisions = re.findall(line, relay.postgrey.log(), re.MULTILINE)
    assert decisions[-1] == "pass" and set(decisions[:-1]) == {"greylist"}, decisions
    assert len(decisions) - 1 > SEND_RETRIES + 1, f"past the old budget: {decisions}"
    poll(lambda: relay.maildir("u4"), 15, "the mail to arrive")
    assert message_ids(relay, "u4") == [outcome["message_id"]]
    header = str(parsed(relay.maildir("u4")[0])["X-Greylist"])
    delayed = re.match(r"delayed (\d+) seconds by postgrey", header)
    assert delayed and int(delayed[1]) >= WINDOW, header
    assert "retries_exhausted" not in stack.worker.log()
