"""A real Postfix's anvil limit (``smtpd_client_message_rate_limit``): a burst beyond it is
refused with Postfix's own ``450 4.7.1 Error: too much mail from 127.0.0.1``, which holds the
sender (a rate reply: ``tests/mail/reply_corpus.py``), and every mail still arrives once, none
failed. The refusals are counted from Postfix's log."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devservers.postfix import PostfixRelay
from tests.relay.stack import RelayStack, message_ids, relay_stack
from tests.waiting import poll

pytestmark = [pytest.mark.server, pytest.mark.slow]

#: What Postfix logs for each MAIL FROM it refuses beyond the limit.
REFUSED = "Message delivery request rate limit exceeded"
BURST = 6


@pytest.fixture(scope="module")
def anvil_stack(anvil_relay: PostfixRelay) -> Iterator[RelayStack]:
    with relay_stack(
        anvil_relay, MAILGUARD_RETRY_BACKOFF="1s", MAILGUARD_SMTP_ATTEMPTS="1"
    ) as stack:
        yield stack


def test_a_burst_beyond_anvils_limit_arrives_once(anvil_stack: RelayStack) -> None:
    """Six mails to six recipients at once, Postfix taking three per 5 s: three arrive at
    once, the next is refused with ``450 4.7.1 ... too much mail``, which holds the sender (a
    rate reply), and after the hold anvil's next window takes them: each mail ``sent`` and in
    its Maildir once."""
    relay = anvil_stack.relay
    users = [f"u{n}" for n in range(4, 4 + BURST)]
    results = [anvil_stack.send(relay.address(user)) for user in users]
    outcomes = anvil_stack.settled(results, timeout=50)
    assert [o["status"] for o in outcomes] == ["sent"] * BURST, outcomes
    for user, outcome in zip(users, outcomes, strict=True):
        poll(lambda u=user: relay.maildir(u), 15, f"{user}'s mail to arrive")  # type: ignore[misc]
        assert message_ids(relay, user) == [outcome["message_id"]]
    refused = relay.logged(REFUSED, 1)
    assert refused >= 1, relay.log()[-2000:]
    retried = [o for o in outcomes if o["attempts"] > 1]
    assert retried, outcomes
    holds = [line for line in anvil_stack.worker.log().splitlines() if "hold started" in line]
    assert holds and "too much mail from 127.0.0.1" in holds[0], holds
