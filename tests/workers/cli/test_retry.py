"""``mailguard retry`` with a real worker, Redis and the aiosmtpd server: a mail refused
``554 5.7.1`` ends failed with its payload kept; once the server accepts, a retry delivers it
once, under ``<id>.retry1``, however often (and however many at once) the command runs."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from mailer.records.failed import RedisFailedStore
from mailer.records.ledger import ledger_from_url
from mailer.storage import client_from_url
from tests.waiting import poll
from tests.workers.cli.test_cli import SCRIPT, one_line_error, run
from tests.workers.conftest import Stack, StackFactory
from workers.waiting.payload import Parked

TASK = "mailguard.send_mail"
REJECTED = "554 5.7.1 message rejected"

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]


def _send(stack: Stack, mail_id: str, to: str) -> str:
    """Enqueue one mail and wait for its run to end; its Celery state."""
    result = stack.app.send_task(
        TASK, args=[to], kwargs={"subject": f"about {mail_id}", "body": "b", "mail_id": mail_id}
    )
    poll(lambda: result.state in ("SUCCESS", "FAILURE"), 20, f"mail {mail_id} to end")
    return str(result.state)


def _status(stack: Stack, mail_id: str) -> str | None:
    recorded = ledger_from_url(stack.env["MAILGUARD_LIMITER_URL"]).recorded(mail_id)
    return None if recorded is None else recorded.status


def _delivered(stack: Stack, subject: str) -> int:
    return sum(1 for d in stack.smtp.delivered if d.message["Subject"] == subject)


def _at_once(env: dict[str, str], args: list[str], n: int) -> list[tuple[int, str, str]]:
    """``n`` ``mailguard`` processes started together; their exit codes and output."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
    procs = [
        subprocess.Popen(
            [str(SCRIPT), *args], env=base | env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(n)
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        done.append((proc.returncode, out.decode(), err.decode()))
    return done


def test_a_failed_mail_is_sent_again_once(stack: StackFactory) -> None:
    """Refused ``554 5.7.1``: FAILURE, ``failed`` in the ledger, payload kept with the
    retention as its TTL. Three ``retry`` processes at once: one enqueues ``order-1.retry1``,
    two are refused (retried already); a fourth run likewise. The server, accepting now, gets
    the mail once; ``outcome`` shows the old id failed and the new one sent. A mail that was
    sent (the new one, and one sent at first) is refused in one line, nothing enqueued."""
    s = stack(MAILGUARD_POLICY="100/1s", MAILGUARD_FAILED_RETENTION="2d")
    s.smtp.fail_data(REJECTED, times=1)
    assert _send(s, "order-1", "ada@example.com") == "FAILURE"
    assert _status(s, "order-1") == "failed"
    client = client_from_url(s.env["MAILGUARD_LIMITER_URL"])
    store = RedisFailedStore(client, s.env["MAILGUARD_LIMITER_URL"])
    ttl_ms = client.pttl(store.kept_key("order-1"))
    assert 2 * 86_400_000 - 60_000 < ttl_ms <= 2 * 86_400_000
    kept = Parked.decode(client.get(store.kept_key("order-1")), "order-1")
    assert kept.args == ["ada@example.com"] and "_progress" not in kept.kwargs

    runs = _at_once(s.env, ["retry", "order-1"], 3)
    assert sorted(code for code, _, _ in runs) == [0, 1, 1], runs
    assert [out for code, out, _ in runs if code == 0] == ["retried order-1 as order-1.retry1\n"]
    for code, _, err in runs:
        if code:
            assert "was retried already, as order-1.retry1" in one_line_error(err)
    again = run(["retry", "order-1"], s.env)
    assert again.returncode == 1
    assert one_line_error(again.stderr).endswith("was retried already, as order-1.retry1")

    poll(lambda: _status(s, "order-1.retry1") == "sent", 20, "the retry to be sent")
    assert _delivered(s, "about order-1") == 1
    old = json.loads(run(["outcome", "order-1", "--json"], s.env).stdout)
    new = json.loads(run(["outcome", "order-1.retry1", "--json"], s.env).stdout)
    assert (old["outcome"]["status"], new["outcome"]["status"]) == ("failed", "sent")

    assert _send(s, "sent-1", "bob@example.com") == "SUCCESS"
    for sent in ("sent-1", "order-1.retry1"):
        refused = run(["retry", sent], s.env)
        assert refused.returncode == 1
        assert one_line_error(refused.stderr).endswith(
            f"mail {sent} ended sent: only a failed mail is retried"
        )
    unknown = run(["retry", "nobody"], s.env)
    assert unknown.returncode == 1 and "no failed mail nobody is kept" in unknown.stderr
    assert _delivered(s, "about order-1") == 1 and _delivered(s, "about sent-1") == 1
    assert s.smtp.delivered and len(s.smtp.delivered) == 2
    client.close()


def test_retry_failed_since_sends_each_failed_mail_in_the_window_once(
    stack: StackFactory,
) -> None:
    """Two mails refused ``554 5.7.1`` now, and one kept as failed two hours ago: ``retry
    --failed --since 1h`` enqueues the two (each delivered once), not the older; run again it
    retries nothing."""
    s = stack(MAILGUARD_POLICY="100/1s")
    s.smtp.fail_data(REJECTED, times=2)
    assert _send(s, "news-1", "ada@example.com") == "FAILURE"
    assert _send(s, "news-2", "bob@example.com") == "FAILURE"
    client = client_from_url(s.env["MAILGUARD_LIMITER_URL"])
    store = RedisFailedStore(client, s.env["MAILGUARD_LIMITER_URL"])
    older = Parked(
        "old-1",
        ["eve@example.com"],
        {"subject": "about old-1", "body": "b", "mail_id": "old-1"},
        0.0,
    )
    now = float(client.time()[0])
    store.keep("old-1", older.encode(), failed_at=now - 7200, retention=86_400)

    done = run(["retry", "--failed", "--since", "1h"], s.env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "retried news-1 as news-1.retry1",
        "retried news-2 as news-2.retry1",
        "2 failed mail(s) retried",
    ]
    for mail_id in ("news-1", "news-2"):
        poll(lambda m=mail_id: _status(s, f"{m}.retry1") == "sent", 20, f"{mail_id} sent")
        assert _delivered(s, f"about {mail_id}") == 1
    assert store.failed_at("old-1") == now - 7200  # outside the window: still kept
    again = run(["retry", "--failed", "--since", "1h"], s.env)
    assert again.stdout.splitlines() == ["0 failed mail(s) retried"], again.stderr
    usage = run(["retry", "--failed"], s.env)
    assert usage.returncode == 2 and "--failed needs --since" in one_line_error(usage.stderr)
    assert len(s.smtp.delivered) == 2
    client.close()
