"""Crash points before any run: the producer dies once the broker took the mail; a worker dies
between kombu's ``BRPOP`` and its unacknowledged record (the message is gone from the broker:
the outbox brings it back)."""

from __future__ import annotations

import signal

import pytest

from devservers.smtp_server import SmtpTestServer
from tests.reliability.crash.harness import OUTBOX_GRACE, CrashRun

pytestmark = [pytest.mark.server, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]

ADA = "ada@example.com"


def test_a_producer_killed_once_the_broker_took_its_mail(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """``published``: the producer dies right after its second mail was published (the third
    never is), no worker running; a worker started then sends the two, once each, spaced."""
    with CrashRun(redis_url, smtp_server) as run:
        producer = run.produce(
            (ADA, "pub-0"), (ADA, "pub-1"), (ADA, "pub-2"), crash_at="published:2"
        )
        assert producer.returncode == -signal.SIGKILL
        assert [mail.mail_id for mail in run.mails] == ["pub-0", "pub-1"]
        run.restart_clean()
        run.check()


def test_a_message_popped_and_not_yet_unacked_is_published_again_by_the_outbox(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """``popped``: the worker dies after ``BRPOP`` took the first mail and before kombu
    recorded it as unacknowledged: the broker holds no copy. The outbox entry written at
    enqueue, never claimed, is published again by the clean worker's watchdog after its grace
    (``MAILGUARD_OUTBOX_GRACE``, 2 s here): every mail sent once, spaced, on time."""
    with CrashRun(redis_url, smtp_server, **dict([OUTBOX_GRACE])) as run:
        doomed = run.doomed("popped")
        run.send((ADA, "pop-0"), (ADA, "pop-1"), (ADA, "pop-2"))
        run.wait_dead(doomed)
        run.restart_clean()
        run.check()
