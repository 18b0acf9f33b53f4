"""Bounces and complaints from ESP webhooks: a real Django test client posts real Postmark
webhook payloads through Anymail's webhook view (basic-auth secret, Anymail's URLs) with
``workers.django_tracking`` installed; the addresses land in the workers' suppression list on a
real Redis and the next mail to them, through a real worker, ends ``dropped`` / ``suppressed``.
The event rules themselves (:mod:`mailer.records.suppression.events`) run on memory and Redis.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import django
import pytest
from click.testing import CliRunner
from django.conf import settings
from django.urls import include, path

from devservers.celery_worker import client_app
from devservers.smtp_server import SmtpTestServer
from mailer import InvalidAddress, ManualClock
from mailer.records.suppression import (
    FOREVER,
    Source,
    Suppression,
    record_event,
    suppressions_from_url,
)
from mailer.settings import Settings
from tests.workers.conftest import StackFactory
from workers.cli import main
from workers.process import settings as process_settings

if not settings.configured:  # as workers/django/test_django.py configures it, whichever runs first
    settings.configure(
        EMAIL_BACKEND="workers.django.EmailBackend",
        DEFAULT_FROM_EMAIL="Shop <orders@example.org>",
    )
    django.setup()

from anymail.signals import tracking
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings

from workers.django_tracking import event_name

#: This module is the test's URLconf: Anymail's webhook URLs, as a project includes them.
urlpatterns = [path("anymail/", include("anymail.urls"))]

WEBHOOK_SECRET = "hook:s3cret"
POSTMARK = "/anymail/postmark/tracking/"
DAY = 86_400.0


def _auth(secret: str = WEBHOOK_SECRET) -> str:
    return "Basic " + base64.b64encode(secret.encode()).decode()


def postmark(record: str, kind: str, email: str, *, ago: float = 60.0) -> dict[str, Any]:
    """A Postmark bounce-webhook payload as Postmark posts it (its documented example's fields),
    for an event ``ago`` seconds back."""
    at = datetime.now(timezone.utc) - timedelta(seconds=ago)
    return {
        "RecordType": record,
        "MessageStream": "outbound",
        "ID": 4323372036854775807,
        "Type": kind,
        "TypeCode": 1,
        "Name": kind,
        "Tag": "Test",
        "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483",
        "Metadata": {},
        "ServerID": 23,
        "Description": "The server was unable to deliver your message (ex: unknown user).",
        "Details": "smtp;550 5.1.1 The email account that you tried to reach does not exist.",
        "Email": email,
        "From": "orders@example.org",
        "BouncedAt": at.isoformat().replace("+00:00", "Z"),
        "DumpAvailable": False,
        "Inactive": True,
        "CanActivate": True,
        "Subject": "Your order",
    }


@pytest.fixture
def tracking_stack(stack: StackFactory) -> Iterator[dict[str, str]]:
    """A worker on the test's Redis and SMTP server; this process's mailguard settings (which
    the webhook receiver reads) the same; Django with Anymail and the tracking app installed."""
    parts = stack(MAILGUARD_POLICY="100/1s", concurrency=1, settings=True)
    with _django_with_tracking():
        yield parts.env


def _post(payload: dict[str, Any], auth: str = _auth()) -> int:
    response = Client(raise_request_exception=False).post(
        POSTMARK, data=json.dumps(payload), content_type="application/json", HTTP_AUTHORIZATION=auth
    )
    return int(response.status_code)


def _suppressed(env: dict[str, str], address: str) -> tuple[int, dict[str, Any] | None]:
    shown = CliRunner().invoke(main, ["suppressed", address, "--json"], env=env)
    assert address not in shown.output, "the address is never printed"
    return shown.exit_code, json.loads(shown.output)


@pytest.mark.slow
def test_postmark_webhooks_suppress_and_the_next_mail_is_dropped(
    tracking_stack: dict[str, str], smtp_server: SmtpTestServer
) -> None:
    """A hard bounce and a spam complaint posted by Postmark suppress their addresses (never
    sent to before): a mail to each through the worker ends dropped/suppressed without reaching
    the server. A soft bounce, a transient bounce and a delivery suppress nothing; a post
    without the webhook secret is refused and suppresses nothing."""
    env = tracking_stack
    assert _post(postmark("Bounce", "HardBounce", "ada@example.com", ago=120)) == 200
    assert _post(postmark("SpamComplaint", "SpamComplaint", "cy@example.com")) == 200
    assert _post(postmark("Bounce", "SoftBounce", "bob@example.com")) == 200
    assert _post(postmark("Bounce", "Transient", "dee@example.com")) == 200
    assert _post(postmark("Delivery", "", "eve@example.com")) == 200
    assert _post(postmark("Bounce", "HardBounce", "fay@example.com"), _auth("hook:wrong")) == 400
    assert _post(postmark("Bounce", "BadEmailAddress", "gil@example.com")) == 200

    code, ada = _suppressed(env, "ada@example.com")
    assert code == 0 and ada is not None
    assert ada["source"] == "bounce" and "550 5.1.1" in ada["cause"] and "Postmark" in ada["cause"]
    assert abs(ada["since"] - (time.time() - 120)) < 5, "counted from the event's time"
    assert abs(ada["until"] - ada["since"] - 30 * DAY) < 1, "MAILGUARD_SUPPRESS_FOR (30d)"
    code, cy = _suppressed(env, "cy@example.com")
    assert code == 0 and cy is not None and cy["source"] == "complaint" and cy["forever"]
    code, gil = _suppressed(env, "gil@example.com")
    assert code == 0 and gil is not None and (gil["source"], gil["forever"]) == ("rejected", False)
    for address in ("bob@example.com", "dee@example.com", "eve@example.com", "fay@example.com"):
        assert _suppressed(env, address) == (1, None), address
    shown = CliRunner().invoke(main, ["suppressed", "cy@example.com"], env=env)
    assert "for ever (until lifted)" in shown.output and "complaint" in shown.output

    app = client_app(env)
    try:
        sends = {
            to: app.send_task("mailguard.send_mail", args=[to], kwargs={"body": "b"})
            for to in ("ada@example.com", "cy@example.com", "bob@example.com")
        }
        outcomes = {to: r.get(timeout=30) for to, r in sends.items()}
    finally:
        app.close()
    for to in ("ada@example.com", "cy@example.com"):
        assert (outcomes[to]["status"], outcomes[to]["reason"]) == ("dropped", "suppressed")
    assert outcomes["bob@example.com"]["status"] == "sent"
    assert [d.rcpt_tos for d in smtp_server.delivered] == [("bob@example.com",)]


@pytest.mark.slow
def test_a_later_bounce_does_not_shorten_a_complaint(tracking_stack: dict[str, str]) -> None:
    """A complaint then a hard bounce for the same address: still suppressed for ever."""
    assert _post(postmark("SpamComplaint", "SpamComplaint", "cy@example.com")) == 200
    assert _post(postmark("Bounce", "HardBounce", "cy@example.com", ago=1)) == 200
    code, cy = _suppressed(tracking_stack, "cy@example.com")
    assert code == 0 and cy is not None and (cy["source"], cy["forever"]) == ("complaint", True)


@contextmanager
def _django_with_tracking() -> Iterator[None]:
    """Django with Anymail and the tracking app installed, this module as the URLconf."""
    django_settings = override_settings(
        INSTALLED_APPS=["anymail", "workers.django_tracking.MailguardTracking"],
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["testserver"],
        ANYMAIL={"WEBHOOK_SECRET": WEBHOOK_SECRET},
    )
    django_settings.enable()
    try:
        yield
    finally:
        django_settings.disable()
        tracking.disconnect(dispatch_uid="mailguard.suppression")


def test_the_ledger_down_answers_500_so_the_esp_sends_again() -> None:
    """A ledger's Redis that cannot be reached: the webhook answers 500 (the ESP retries)
    rather than dropping the event."""
    env = {"MAILGUARD_LIMITER_URL": "redis://127.0.0.1:1/0", "MAILGUARD_SECRET": "s"}
    old = process_settings.use_settings(Settings.from_env(env))
    try:
        with _django_with_tracking():
            assert _post(postmark("Bounce", "HardBounce", "ada@example.com")) == 500
    finally:
        process_settings.use_settings(old)


def test_a_memory_ledger_stops_django_at_start_in_one_line() -> None:
    old = process_settings.use_settings(Settings())
    try:
        refused = pytest.raises(ImproperlyConfigured, match=r"memory://: a suppression recorded")
        with refused, _django_with_tracking():
            pass
    finally:
        process_settings.use_settings(old)


class _Event:
    """An Anymail tracking event's fields that :func:`event_name` reads."""

    def __init__(self, event_type: str, esp_event: Any = None, **fields: Any) -> None:
        self.event_type = event_type
        self.esp_event = esp_event
        self.description = fields.get("description")
        self.mta_response = fields.get("mta_response")


@pytest.mark.parametrize(
    ("event", "name"),
    [
        (_Event("bounced", {"Type": "HardBounce"}), "bounced"),
        (_Event("bounced", {"Type": "SoftBounce"}), "soft_bounced"),
        (_Event("bounced", {"event": "soft_bounce"}), "soft_bounced"),
        (_Event("bounced", {"type": "activity.soft_bounced"}), "soft_bounced"),
        (_Event("bounced", {}, description="Transient: MailboxFull"), "soft_bounced"),
        (_Event("bounced", {}, mta_response="452 4.2.2 mailbox full"), "soft_bounced"),
        (_Event("bounced", {}, mta_response="550 5.1.1 user unknown"), "bounced"),
        (_Event("complained", None), "complained"),
        (_Event("deferred", {}), "deferred"),
    ],
)
def test_which_anymail_events_are_soft(event: _Event, name: str) -> None:
    """Anymail calls some ESPs' soft bounces ``bounced``: the ESP's own label or a 4xx reply
    tells them apart."""
    assert event_name(event) == name


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def url(request: pytest.FixtureRequest) -> str:
    return "memory://" if request.param == "memory" else str(request.getfixturevalue("redis_url"))


def test_record_event_rules(url: str) -> None:
    """bounced and rejected suppress for suppress_for from the event's time, complained for
    ever; soft bounces and other events nothing; an unknown event name and a bad address are
    refused in one line."""
    now = time.time()
    store = suppressions_from_url(url, secret="s", clock=ManualClock(now))
    bounced = record_event(store, "Ada@Example.com", "bounced", at=now - 10, suppress_for=3600)
    assert bounced == Suppression(now - 10, now + 3590, "bounced", "bounce")
    rejected = record_event(store, "bob@example.com", "rejected", detail="blocked")
    assert rejected is not None and (rejected.source, rejected.cause) == (
        "rejected",
        "rejected: blocked",
    )
    complained = record_event(store, "ada@example.com", "complained", at=now)
    assert complained is not None and complained.forever
    assert complained.until == pytest.approx(now + FOREVER)
    again = record_event(store, "ada@example.com", "bounced", suppress_for=3600)
    assert again == complained, "a complaint is not shortened by a later bounce"
    assert store.suppressed("ada@example.com") == complained
    for event in ("soft_bounced", "deferred", "delivered", "opened"):
        assert record_event(store, "eve@example.com", event) is None
    assert store.suppressed("eve@example.com") is None
    with pytest.raises(ValueError, match=r"unknown event 'bounce'; known: "):
        record_event(store, "eve@example.com", "bounce")
    with pytest.raises(InvalidAddress):
        record_event(store, "not an address", "bounced")


def test_an_entry_without_a_source_reads_its_source_from_its_cause() -> None:
    """A value with no source (as written when the cause tells it) reads, its source told by
    its cause."""
    old = Suppression.from_json('{"since": 1.0, "until": 2.0, "cause": "550 5.1.1 unknown"}')
    assert old == Suppression(1.0, 2.0, "550 5.1.1 unknown", "smtp")
    by_hand = Suppression.from_json('{"since": 1.0, "until": 2.0, "cause": "suppressed by hand"}')
    assert by_hand.source == "hand" and not by_hand.forever


@pytest.mark.parametrize(
    ("cause", "source", "written"),
    [
        ("550 5.1.1 user unknown", "smtp", False),
        ("bounced: Postmark smtp;550 5.1.1", "bounce", False),
        ("complained", "complaint", False),
        ("rejected: blocked", "rejected", False),
        ("suppressed by hand", "hand", False),
        ("550 said the customer on the phone", "hand", True),
    ],
)
def test_the_source_is_stored_only_when_the_cause_does_not_tell_it(
    cause: str, source: Source, written: bool
) -> None:
    """An entry is since, until and cause alone unless its cause does not tell its source;
    each reads back the same."""
    entry = Suppression(1.0, 2.0, cause, source)
    stored = json.loads(entry.to_json())
    assert ("source" in stored) is written
    assert Suppression.from_json(entry.to_json()) == entry
