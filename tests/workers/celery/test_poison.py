"""A message that ends every worker which takes it is quarantined, not replayed forever.

A real prefork worker on a real Redis broker and ledger; the SMTP server holds DATA for the
test mail, and the test kills the worker (SIGKILL, the whole process group) each time the mail
reaches DATA, as a message that crashes its worker would. Late acks bring the message back to
the next worker. After ``MAILGUARD_POISON_AFTER`` redelivered copies were handed to a pool
without any run ending, the next copy is quarantined on receipt: outcome ``dropped`` /
``poison`` (final: a later copy answers it), listed by ``mailguard status --dead-letters``, and
the worker carries on with the next mail.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll
from workers.cli import main

TASK = "mailguard.send_mail"

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.mark.timeout(120)
def test_a_message_that_keeps_ending_its_worker_is_quarantined(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """Three deaths, then dropped/poison on receipt, listed as a dead letter; the worker goes on."""
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_VISIBILITY_TIMEOUT="2s",
        MAILGUARD_RESTORE_INTERVAL="300ms",
        MAILGUARD_CLAIM_LEASE="1s",
        MAILGUARD_POISON_AFTER="2",
    )
    app = client_app(env)
    smtp_server.slow_data(60, times=3)  # DATA hangs: the test kills the worker meanwhile
    result = app.send_task(
        TASK, args=["ada@example.com"], kwargs={"subject": "s", "body": "b", "mail_id": "p-1"}
    )
    worker = CeleryWorker(env, concurrency=1)
    try:
        for death in range(3):  # the first delivery, then two counted redeliveries
            worker.start()
            poll(lambda n=death: smtp_server.handler.data_commands > n, 20, f"DATA #{death + 1}")
            worker.kill()
            worker = CeleryWorker(env, concurrency=1)
        worker.start()
        poll(lambda: result.state == "SUCCESS", 20, "the copy to be quarantined")
        outcome = result.get(timeout=1)
        assert (outcome["status"], outcome["reason"]) == ("dropped", "poison"), outcome
        assert smtp_server.delivered == []
        assert "dropped on receipt (poison)" in worker.log()
        after = app.send_task(TASK, args=["bob@example.com"], kwargs={"subject": "t", "body": "b"})
        assert after.get(timeout=20)["status"] == "sent", "the worker carries on"
        again = app.send_task(TASK, args=["ada@example.com"], kwargs={"mail_id": "p-1"})
        assert again.get(timeout=20) == outcome, "final: a later copy answers the quarantine"
        assert worker.process is not None and worker.process.poll() is None
    finally:
        worker.stop(timeout=10)
        app.close()
    listed = CliRunner().invoke(main, ["status", "--dead-letters", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    letters = json.loads(listed.output)
    assert [(d["mail_id"], d["reason"]) for d in letters] == [("p-1", "poison")]
    assert "ada@example.com" not in listed.output
