"""A real Postfix stopped for longer than the old retry budget (``MAILGUARD_SEND_RETRIES`` = 2
tries after the first at ``RETRY_BACKOFF`` 1 s doubling to ``RETRY_BACKOFF_MAX`` 2 s: about
3 s), then started again on the same port: every mail asked for while it was down is kept, and
arrives once; none fails. The backoff is shortened by settings; the promise (a mail kept until
its lifetime) is the same at the defaults' 30 s to 4000 s."""

from __future__ import annotations

import pytest

from tests.relay.conftest import RelayFactory
from tests.relay.stack import message_ids, relay_stack
from tests.waiting import poll

pytestmark = [pytest.mark.server, pytest.mark.slow]

SEND_RETRIES = 2
USERS = ["dee", "u5", "u6"]


def test_mails_kept_through_an_outage_longer_than_the_old_budget(
    make_relay: RelayFactory,
) -> None:
    """Postfix down while three mails are sent: each is refused a connection more than
    ``SEND_RETRIES`` + 1 times (seen in the worker's log), none ends; Postfix started again:
    each ``sent`` with attempts > 1, once in its Maildir, Postfix's queue empty."""
    relay = make_relay()
    relay.stop()
    with relay_stack(
        relay,
        MAILGUARD_RETRY_BACKOFF="1s",
        MAILGUARD_RETRY_BACKOFF_MAX="2s",
        MAILGUARD_SEND_RETRIES=str(SEND_RETRIES),
        MAILGUARD_SMTP_ATTEMPTS="1",
        # Each mail's own backoff is the point: no sender hold from three recipients'
        # refusals (whose doubling spaces the tries out past the test's wait).
        MAILGUARD_HOLD_EVIDENCE="off",
    ) as stack:
        results = [stack.send(relay.address(user)) for user in USERS]
        refused = f"connecting to 127.0.0.1:{relay.port}"
        past_budget = len(USERS) * (SEND_RETRIES + 2)
        poll(
            lambda: stack.worker.log().count(refused) >= past_budget,
            40,
            "every mail to be refused past the old budget",
        )
        assert not any(r.ready() for r in results), "nothing ends while the relay is down"
        relay.start()
        outcomes = stack.settled(results, timeout=40)
        log = stack.worker.log()
    assert [o["status"] for o in outcomes] == ["sent"] * len(USERS), outcomes
    assert all(o["attempts"] > 1 for o in outcomes), outcomes
    assert "retries_exhausted" not in log
    for user, outcome in zip(USERS, outcomes, strict=True):
        poll(lambda u=user: relay.maildir(u), 15, f"{user}'s mail to arrive")  # type: ignore[misc]
        assert message_ids(relay, user) == [outcome["message_id"]]
    assert relay.queued() == 0
