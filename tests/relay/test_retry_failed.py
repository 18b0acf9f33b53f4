"""A mail a real Postfix refused for good, sent again with ``mailguard retry``: Postfix's
``header_checks`` refuses its Subject at the end of DATA (``550 5.7.1``), the mail ends
``failed`` with nothing delivered; the rule removed (Postfix restarted, the worker's session to
it gone), ``mailguard retry MAIL_ID`` enqueues it once as ``MAIL_ID.retry1``, which arrives in
the Maildir once; a second ``retry`` is refused."""

from __future__ import annotations

import json

import pytest

from tests.relay.conftest import RelayFactory
from tests.relay.stack import message_ids, relay_stack
from tests.waiting import poll
from tests.workers.cli.test_cli import run

pytestmark = [pytest.mark.server, pytest.mark.slow]

REFUSED = "refuse me"


def test_a_failed_mail_retried_arrives_once(make_relay: RelayFactory) -> None:
    """``order-7`` refused ``550 5.7.1``: ``failed``, not delivered; after the rule is gone,
    ``retry order-7``: ``order-7.retry1`` ``sent``, once in ada's Maildir, ``order-7``'s outcome
    still ``failed``; ``retry order-7`` again exits 1."""
    relay = make_relay(refused_subject=REFUSED)
    with relay_stack(relay, MAILGUARD_SMTP_ATTEMPTS="1") as stack:
        result = stack.send(relay.address("ada"), subject=f"please {REFUSED}", mail_id="order-7")
        [failed] = stack.settled([result], timeout=30)
        assert failed["status"] == "failed" and "5.7.1" in str(failed), failed
        assert relay.logged("Subject refused by this relay") >= 1
        assert relay.maildir("ada") == []
        relay.stop_refusing()
        retried = run(["retry", "order-7"], stack.env)
        assert retried.returncode == 0, retried.stderr
        assert retried.stdout == "retried order-7 as order-7.retry1\n"
        [sent] = stack.settled([stack.app.AsyncResult("order-7.retry1")], timeout=30)
        assert sent["status"] == "sent", sent
        poll(lambda: relay.maildir("ada"), 15, "the retried mail to arrive")
        assert message_ids(relay, "ada") == [sent["message_id"]]
        again = run(["retry", "order-7"], stack.env)
        assert again.returncode == 1 and "retried already" in again.stderr, again.stderr
        shown = run(["outcome", "order-7", "--json"], stack.env)
        assert json.loads(shown.stdout)["outcome"]["status"] == "failed", shown.stdout
    assert message_ids(relay, "ada") == [sent["message_id"]], "delivered once, never again"
