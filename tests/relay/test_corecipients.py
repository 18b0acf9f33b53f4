"""Every recipient of a mail has its own outcome, through a Celery worker: a co-recipient that
a real Postfix refuses with ``550 5.1.1`` is recorded by its key and suppressed while the
others get the mail once (checked in Postfix's Maildirs); a co-recipient that the aiosmtpd
server refuses with ``450`` once gets one copy of its own later, nobody a second one."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.postfix import PostfixRelay
from devservers.smtp_server import SmtpTestServer
from mailer.limits.keys import KeyHasher
from mailer.records.suppression import suppressions_from_url
from tests.relay.stack import RelayStack, message_ids, relay_stack
from tests.waiting import poll
from workers import tasks

pytestmark = [pytest.mark.server, pytest.mark.slow]


def key_of(address: str) -> str:
    """The recipient's key in an outcome, as the worker hashes it (the suite's secret)."""
    return KeyHasher("test-secret", "mailguard", "recipient").storage_key(address)


@pytest.fixture(scope="module")
def plain_stack() -> Iterator[RelayStack]:
    """A worker sending to a plain Postfix of this module's own."""
    relay = PostfixRelay(("ada", "bob", "cy")).start()
    try:
        with relay_stack(relay) as stack:
            yield stack
    finally:
        relay.cleanup()


def test_a_co_recipient_unknown_to_postfix_is_recorded_and_suppressed(
    plain_stack: RelayStack,
) -> None:
    """[bob, nobody]: ``sent`` / ``partial``; bob's Maildir has the mail once; the outcome
    names nobody by its key with Postfix's 550 5.1.1 (masked); nobody is suppressed, so a
    later mail to nobody is dropped without reaching Postfix and one to [cy, nobody] goes to
    cy alone."""
    relay = plain_stack.relay
    bob, nobody = relay.address("bob"), relay.address("nobody")
    [outcome] = plain_stack.settled([plain_stack.send([bob, nobody])], timeout=30)
    assert (outcome["status"], outcome["reason"]) == ("sent", "partial"), outcome
    [entry] = outcome["refused"]
    assert entry["recipient"] == key_of(nobody) and entry["code"] == 550, entry
    assert "5.1.1" in entry["reply"] and "nobody@" not in entry["reply"], entry
    assert (entry["suppressed"], entry["retry"]) == (True, None), entry
    poll(lambda: len(relay.maildir("bob")) >= 1, 15, "the mail in bob's Maildir")
    assert message_ids(relay, "bob") == [outcome["message_id"]]
    ledger = plain_stack.env["MAILGUARD_LIMITER_URL"]
    assert suppressions_from_url(ledger, secret="test-secret").suppressed(nobody) is not None
    later, both = plain_stack.settled(
        [plain_stack.send(nobody), plain_stack.send([relay.address("cy"), nobody])], 30
    )
    assert (later["status"], later["reason"]) == ("dropped", "suppressed"), later
    assert (both["status"], both["reason"], both["refused"]) == ("sent", None, []), both
    poll(lambda: len(relay.maildir("cy")) >= 1, 15, "the mail in cy's Maildir")
    assert message_ids(relay, "cy") == [both["message_id"]]
    assert relay.logged(f"550 5.1.1 <{nobody}>") == 1, "nobody's address reached Postfix again"
    assert len(relay.maildir("bob")) == 1


def test_a_co_recipient_refused_for_a_time_gets_one_copy_later(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """bob refused with 450 once: ada gets the mail once; the outcome names bob's copy
    ``<mail id>/2``, which reaches bob alone, once, after the retry backoff. The mail's run
    repeated (the same mail id again, as a redelivery after a crash would run it) answers the
    recorded outcome and enqueues the copy again, whose run answers its own: nobody gets two."""
    ada, bob = "ada@example.com", "bob@example.com"
    env = worker_env(
        redis_url, smtp_server.url, MAILGUARD_POLICY="100/1s", MAILGUARD_RETRY_BACKOFF="1s"
    )
    app = client_app(env)
    worker = CeleryWorker(env).start()
    smtp_server.fail_rcpt_for(bob, "450 4.2.0 <bob@example.com>: mailbox busy")
    try:
        send_mail = app.tasks[tasks.send_mail.name]
        result = send_mail.delay(ada, subject="Hello", body="World", cc=[bob])
        outcome = result.get(timeout=30)
        copy = app.AsyncResult(f"{result.id}/2")
        poll(copy.ready, 30, "bob's copy to settle")
        copied = copy.get(timeout=1)
        repeat = send_mail.delay(ada, subject="Hello", body="World", cc=[bob], mail_id=result.id)
        repeated = repeat.get(timeout=30)
        ran = f"[{result.id}/2] succeeded"
        poll(lambda: worker.log().count(ran) >= 2, 30, "the copy enqueued again to run")
        assert copy.get(timeout=1) == copied
    finally:
        worker.stop()
        app.close()
    assert (outcome["status"], outcome["reason"]) == ("sent", "partial"), outcome
    [entry] = outcome["refused"]
    assert entry == {
        "recipient": key_of(bob),
        "code": 450,
        "reply": "4.2.0 <[recipient]>: mailbox busy",
        "suppressed": False,
        "retry": f"{result.id}/2",
    }
    assert repeated == outcome
    assert (copied["status"], copied["mail_id"]) == ("sent", f"{result.id}/2"), copied
    assert copied["recipient"] == key_of(bob) and copied["refused"] == []
    assert [d.rcpt_tos for d in smtp_server.delivered] == [(ada,), (bob,)]
    received = Counter(to for d in smtp_server.delivered for to in d.rcpt_tos)
    assert received == {ada: 1, bob: 1}
    assert copied["sent_at"] - outcome["sent_at"] >= 1.0 - 0.05  # after the retry backoff
