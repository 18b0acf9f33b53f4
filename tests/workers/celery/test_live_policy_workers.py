"""The live policy on two real Celery workers (each on its own queue, so both are sure to
decide), one real Redis and a real SMTP server: ``mailguard policy set`` to a tighter policy,
and a second later both workers book the mail that would have gone, with no restart; a policy
that does not parse is refused by ``set`` before storing, and a bad version stored behind its
back is refused by the workers, which keep the last good one."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest
from celery import Celery
from celery.result import AsyncResult
from click.testing import CliRunner

from devservers.celery_worker import CeleryWorker, client_app, start_all, stop_all, worker_env
from devservers.smtp_server import SmtpTestServer
from mailer.records.policy import CHECK_EVERY, RedisPolicyStore
from mailer.storage import client_from_url
from tests.waiting import poll
from workers.cli import main
from workers.waiting.outcomes import outcome_of

pytestmark = [pytest.mark.redis, pytest.mark.slow]

#: The environment's policy: loose, and with a day's window so its counts are kept a day (a
#: policy's counts are kept as long as its longest window).
LOOSE = "100/1s, 1000/1d"


def _send(app: Celery, to: str, n: int) -> AsyncResult:
    return app.send_task("mailguard.send_mail", args=[to], kwargs={"subject": f"n{n}", "body": "b"})


def _settled(result: AsyncResult) -> dict[str, Any]:
    """The mail's outcome once it is sent or deferred (a waiting one read whole)."""
    poll(lambda: result.state in ("SUCCESS", "DEFERRED", "FAILURE"), 30, "the mail to settle")
    return dict(outcome_of(result.info, result.state, result.id))


def _past_the_next_check() -> None:
    """Wait out one version check interval: each worker process reads the version again at
    its next mail (a propagation bound, not a limiter window)."""
    time.sleep(CHECK_EVERY + 0.1)


def test_two_workers_take_a_tighter_policy_within_a_second_without_restart(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    envs = [
        worker_env(redis_url, smtp_server.url, MAILGUARD_POLICY=LOOSE, MAILGUARD_QUEUE=queue)
        for queue in ("mail-a", "mail-b")
    ]
    apps = [client_app(env) for env in envs]
    workers = start_all(
        [CeleryWorker(env, name=f"w{n}", concurrency=1) for n, env in enumerate(envs)]
    )
    pids = [w.process.pid for w in workers if w.process is not None]
    runner = CliRunner()
    try:
        before = [
            _settled(_send(app, to, 0))
            for app, to in zip(apps, ("ada@x.org", "bob@x.org"), strict=True)
        ]
        assert [o["status"] for o in before] == ["sent", "sent"], before

        changed = runner.invoke(main, ["policy", "set", "1/1h", "--yes"], env=envs[0])
        assert changed.exit_code == 0, changed.output
        assert "policy version 1 stored: 1/1h" in changed.output
        _past_the_next_check()
        after = [
            _settled(_send(app, to, 1))
            for app, to in zip(apps, ("ada@x.org", "bob@x.org"), strict=True)
        ]
        for outcome in after:
            assert (outcome["status"], outcome["reason"], outcome["tier"]) == (
                "deferred",
                "booked",
                "1/1h",
            ), outcome  # under LOOSE it would have gone at once

        refused = runner.invoke(main, ["policy", "set", "1/0s", "--yes"], env=envs[1])
        assert refused.exit_code == 2 and refused.output.count("\n") == 1, refused.output
        assert refused.output.startswith("mailguard: error: policy set: policy '1/0s': ")
        shown = runner.invoke(main, ["policy", "show", "--json"], env=envs[1])
        assert json.loads(shown.output)["version"] == 1, "nothing stored"

        client = client_from_url(redis_url)
        RedisPolicyStore(client, redis_url).put('{"policy": "as fast as you can"}')
        client.close()
        _past_the_next_check()
        kept = [
            [_settled(_send(app, to, n)) for n in (2, 3)]
            for app, to in zip(apps, ("cy@x.org", "dee@x.org"), strict=True)
        ]
        for first, second in kept:
            assert first["status"] == "sent" and (second["status"], second["tier"]) == (
                "deferred",
                "1/1h",
            ), (first, second)
        logs = [w.log() for w in workers]
    finally:
        stop_all(workers)
        for app in apps:
            app.close()
    for log in logs:
        assert "live policy version 1 in force: 1/1h" in log
        assert "LIVE POLICY VERSION 2 REFUSED, version 1 stays in force: policy " in log
    assert len(pids) == 2, "the same worker processes all along (no restart)"
    mended = runner.invoke(main, ["policy", "set", "1/2h", "--yes"], env=envs[0])
    assert mended.exit_code == 0 and "policy version 3 stored" in mended.output, mended.output
    history = runner.invoke(main, ["policy", "history"], env=envs[0])
    assert (
        history.exit_code == 0
        and "1/1h" in history.output
        and "does not read" not in history.output
    )
    ids = Counter(d.message["Message-ID"] for d in smtp_server.delivered)
    assert len(ids) == 4 and set(ids.values()) == {1}, "each sent mail delivered exactly once"
