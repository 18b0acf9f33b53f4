"""A real Postfix stopped (SIGTERM to its master, its port closed) and started again on the
same port, within the worker's retry budget: the mails asked for while it was down are tried,
refused a connection, kept, and arrive once each after the restart; the mail sent before the
outage is not sent again."""

from __future__ import annotations

import pytest

from tests.relay.conftest import RelayFactory
from tests.relay.stack import message_ids, relay_stack
from tests.waiting import poll

pytestmark = [pytest.mark.server, pytest.mark.slow]


def test_mails_asked_for_during_an_outage_arrive_once_after_it(make_relay: RelayFactory) -> None:
    """ada's mail arrives; Postfix stops; mails for bob and cy fail to connect (each at least
    once, seen in the worker's log); Postfix starts again: every mail ``sent``, each once in
    its Maildir, Postfix's queue empty."""
    relay = make_relay()
    with relay_stack(relay, MAILGUARD_RETRY_BACKOFF="500ms", MAILGUARD_SMTP_ATTEMPTS="1") as stack:
        [before] = stack.settled([stack.send("ada@example.com")], timeout=30)
        relay.stop()
        assert relay.master_pid() is None
        during = [stack.send("bob@example.com"), stack.send("cy@example.com")]
        refused = f"connecting to 127.0.0.1:{relay.port}"
        poll(lambda: stack.worker.log().count(refused) >= 2, 20, "both mails to find it down")
        assert not any(r.ready() for r in during), "nothing ends while the relay is down"
        relay.start()
        outcomes = stack.settled(during, timeout=40)
    assert [o["status"] for o in [before, *outcomes]] == ["sent"] * 3, outcomes
    assert all(o["attempts"] >= 2 for o in outcomes), outcomes
    for user, outcome in zip(["ada", "bob", "cy"], [before, *outcomes], strict=True):
        poll(lambda u=user: relay.maildir(u), 15, f"{user}'s mail to arrive")  # type: ignore[misc]
        assert message_ids(relay, user) == [outcome["message_id"]]
    assert relay.queued() == 0
