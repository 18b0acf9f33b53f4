"""Bulk kinds end to end: a real prefork worker, a real SMTP server (aiosmtpd) and Redis. A
newsletter kind gets one-click unsubscribe with two settings; a click stops the next newsletter
to that recipient and nothing else; a complaint, through Anymail's real ``tracking`` signal and
``workers.django_tracking``, pauses the newsletter from the next mail on while login codes keep
flowing; ``mailguard reputation`` shows it and ``resume`` lifts it."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import django
import pytest
from click.testing import CliRunner
from django.conf import settings as django_settings

from devservers.celery_worker import client_app
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll
from tests.workers.conftest import StackFactory
from workers import unsubscribe as endpoint
from workers.cli import main
from workers.process import settings as process_settings

if (
    not django_settings.configured
):  # as workers/django/test_django.py configures it, whichever first
    django_settings.configure(
        EMAIL_BACKEND="workers.django.EmailBackend",
        DEFAULT_FROM_EMAIL="Shop <orders@example.org>",
    )
    django.setup()

from anymail.signals import AnymailTrackingEvent, tracking

from workers import django_tracking

NEWS = "news@example.org"


@pytest.fixture
def bulk_stack(stack: StackFactory) -> Iterator[dict[str, str]]:
    """A worker with a bulk ``newsletter`` kind (the two settings) and the reputation on
    (complaints 10 %, from 5 mails); this process's settings the same, the tracking receiver
    connected to Anymail's signal."""
    parts = stack(
        MAILGUARD_POLICY="100/1s",
        MAILGUARD_SENDER=f"News <{NEWS}>",
        MAILGUARD_KIND_NEWSLETTER_UNSUBSCRIBE="1",
        MAILGUARD_UNSUBSCRIBE_URL="https://example.org/unsubscribe",
        MAILGUARD_REPUTATION="complaint 10%",
        MAILGUARD_REPUTATION_MIN="5",
        concurrency=1,
        settings=True,
    )
    django_tracking.connect()
    try:
        yield parts.env
    finally:
        tracking.disconnect(dispatch_uid="mailguard.suppression")


def _send(app: Any, to: str, kind: str) -> Any:
    return app.send_task(
        "mailguard.send_mail", args=[to], kwargs={"kind": kind, "subject": "s", "body": "b"}
    )


@pytest.mark.slow
def test_a_click_and_a_complaint_stop_newsletters_and_nothing_else(
    bulk_stack: dict[str, str], smtp_server: SmtpTestServer
) -> None:
    env = bulk_stack
    app = client_app(env)
    try:
        news = [_send(app, f"r{n}@example.com", "newsletter").get(timeout=30) for n in range(5)]
        code = _send(app, "r0@example.com", "code").get(timeout=30)
        assert all(o["status"] == "sent" for o in [*news, code])
        by_to = {d.rcpt_tos[0]: d.message for d in smtp_server.delivered}
        assert len(smtp_server.delivered) == 6
        link = str(by_to["r1@example.com"]["List-Unsubscribe"]).strip("<>")
        assert link.startswith("https://example.org/unsubscribe/")
        assert by_to["r1@example.com"]["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        codes = [d.message for d in smtp_server.delivered if d.message["Subject"] == "s"]
        assert sum(m["List-Unsubscribe"] is None for m in codes) == 1, "the code carries none"

        # One click (the endpoint's own view; the WSGI server is tests/guard/test_unsubscribe.py's).
        answer = endpoint.Application(process_settings.current()).answer(
            "POST", link, b"List-Unsubscribe=One-Click"
        )
        assert answer.status.startswith("200")
        dropped = _send(app, "r1@example.com", "newsletter").get(timeout=30)
        assert (dropped["status"], dropped["reason"]) == ("dropped", "unsubscribed")
        assert _send(app, "r1@example.com", "code").get(timeout=30)["status"] == "sent"

        # A complaint about r2's newsletter (1 of 7 mails sent: over 10 %) pauses the
        # newsletter from the next mail on; login codes keep flowing.
        event = AnymailTrackingEvent(
            event_type="complained",
            recipient="r2@example.com",
            message_id=news[2]["message_id"],
            esp_event={},
        )
        tracking.send(sender=object, event=event, esp_name="Postmark")
        waiting = [_send(app, "r9@example.com", "newsletter")]
        poll(lambda: waiting[0].state == "DEFERRED", 30, "the next newsletter to be deferred")
        info = waiting[0].info
        assert info["reason"] == "reputation" and "complaint" in info["detail"]
        assert _send(app, "r9@example.com", "code").get(timeout=30)["status"] == "sent"
        assert not any(d.rcpt_tos == ("r9@example.com",) and d.message["List-Unsubscribe"]
                       for d in smtp_server.delivered)  # fmt: skip

        shown = CliRunner().invoke(main, ["reputation"], env=env)
        assert shown.exit_code == 1 and "PAUSED" in shown.output and NEWS in shown.output
        typo = CliRunner().invoke(main, ["reputation", "resume", "nws@example.org"], env=env)
        assert typo.exit_code == 2 and "not counted; known: news@example.org" in typo.output
        resumed = CliRunner().invoke(main, ["reputation", "resume", NEWS, "--by", "ops"], env=env)
        assert resumed.exit_code == 0 and "resumed by ops" in resumed.output
        again = _send(app, "r8@example.com", "newsletter").get(timeout=30)
        assert again["status"] == "sent"
        shown = CliRunner().invoke(main, ["reputation", "--json"], env=env)
        [row] = json.loads(shown.output)
        assert shown.exit_code == 0 and row["pause"]["lifted_by"] == "ops" and not row["paused"]
        assert row["pause"]["forgiven"] == {"bounced": 0, "complained": 1}
        waiting.clear()  # a pending result lets go of the result backend while it still answers
        gc.collect()
    finally:
        app.close()
