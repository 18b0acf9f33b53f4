"""One-click unsubscribe: the signed token, the headers a bulk kind's mail carries, and the
endpoint served by a real ``wsgiref`` server on 127.0.0.1 and through Django's test client, on
a real Redis (stopped for the outage test). The guard runs in this process with the memory
transport (the worker's path is in ``tests/workers/celery/test_bulk_worker.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import django
import pytest
from click.testing import CliRunner
from django.conf import settings as django_settings
from django.urls import path

from devservers.redis_servers import RedisServer
from mailer.factory import build_guard
from mailer.guard import Finish, MailRequest
from mailer.mail.transports.memory import MemoryTransport
from mailer.metrics import NO_METRICS
from mailer.settings import Settings
from mailer.unsubscribe import Claims, InvalidToken, Signer
from workers import unsubscribe as endpoint
from workers.cli import main

if (
    not django_settings.configured
):  # as workers/django/test_django.py configures it, whichever first
    django_settings.configure(
        EMAIL_BACKEND="workers.django.EmailBackend",
        DEFAULT_FROM_EMAIL="Shop <orders@example.org>",
    )
    django.setup()

from django.test import Client, override_settings

#: This module is the Django test's URLconf: the view mounted as a project mounts it.
urlpatterns = [path("unsubscribe/<str:token>", endpoint.django_view)]

ADA = "Ada@Example.com"
ROOT = Path(__file__).resolve().parents[2]


def _env(redis_url: str, base: str = "http://127.0.0.1:8000/unsubscribe") -> dict[str, str]:
    return {
        "MAILGUARD_LIMITER_URL": redis_url,
        "MAILGUARD_SMTP_URL": "memory://",
        "MAILGUARD_SECRET": "test-secret",
        "MAILGUARD_SENDER": "News <news@example.org>",
        "MAILGUARD_POLICY": "100/1s",
        "MAILGUARD_KIND_NEWSLETTER_UNSUBSCRIBE": "1",
        "MAILGUARD_KIND_NEWSLETTER_MAX_WAIT": "1d",
        "MAILGUARD_UNSUBSCRIBE_URL": base,
    }


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def served(redis_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    """The endpoint on a real ``wsgiref`` server on 127.0.0.1 (a free port) in a thread."""
    yield from _serve(redis_url)


def _serve(redis_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    probe = make_server("127.0.0.1", 0, endpoint.Application(), WSGIServer, _Quiet)
    port = probe.server_port
    probe.server_close()
    env = _env(redis_url, f"http://127.0.0.1:{port}/unsubscribe")
    app = endpoint.Application(Settings.from_env(env))
    server = make_server("127.0.0.1", port, app, WSGIServer, _Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/unsubscribe", env
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _send(env: dict[str, str], kind: str, to: str = ADA) -> tuple[Finish, EmailMessage | None]:
    guard = build_guard(Settings.from_env(env), metrics=NO_METRICS)
    step = guard.process(
        # A new mail id each send: id(guard) was reused once a guard was collected, and the
        # ledger then answered the earlier mail's recorded outcome.
        MailRequest(to=to, mail_id=f"{kind}-{uuid.uuid4()}", kind=kind, subject="s", body="b")
    )
    assert isinstance(step, Finish)
    sent = guard.transport.sent if isinstance(guard.transport, MemoryTransport) else []
    return step, (sent[-1] if sent else None)


def _http(method: str, url: str, body: bytes | None = None) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, data=body, method=method)  # noqa: S310 - 127.0.0.1
    if body is not None:
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def _link(message: EmailMessage) -> str:
    return str(message["List-Unsubscribe"]).strip("<>")


def test_a_token_names_recipient_sender_and_kind_and_no_change_passes() -> None:
    """A token round-trips; any character changed, or another secret, fails to verify; the
    address is not in it."""
    signer = Signer("test-secret")
    claims = Claims("HVKgq-CuoIJUkNBu", "news@example.org", "newsletter")
    token = signer.token(claims)
    assert signer.verify(token) == claims
    for at in range(len(token)):
        changed = token[:at] + ("A" if token[at] != "A" else "B") + token[at + 1 :]
        with pytest.raises(InvalidToken):
            signer.verify(changed)
    with pytest.raises(InvalidToken):
        Signer("another").verify(token)
    with pytest.raises(InvalidToken):
        signer.verify("x" * 1000)


def test_only_bulk_kinds_carry_the_one_click_headers(redis_url: str) -> None:
    """A newsletter carries ``List-Unsubscribe`` (the base URL, a token without the address)
    and ``List-Unsubscribe-Post: List-Unsubscribe=One-Click``; a login code carries neither."""
    env = _env(redis_url)
    step, news = _send(env, "newsletter")
    assert step.outcome.status == "sent" and news is not None
    link = _link(news)
    assert link.startswith("http://127.0.0.1:8000/unsubscribe/")
    assert "ada" not in link.lower() and "example.com" not in link.lower()
    assert news["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    _, code = _send(env, "code", "bob@example.com")
    assert code is not None and code["List-Unsubscribe"] is None
    assert code["List-Unsubscribe-Post"] is None


def test_a_bulk_kind_without_the_url_refuses_to_start_in_one_line() -> None:
    """``celery -A workers.app worker`` with a bulk kind and no URL exits non-zero with one
    line naming MAILGUARD_UNSUBSCRIBE_URL, before ``ready.``; a plain http URL is refused."""
    env = {"MAILGUARD_KIND_NEWSLETTER_UNSUBSCRIBE": "1", "MAILGUARD_SECRET": "s"}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "--pool", "solo"],
        env=clean | env | {"PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "ready." not in output and "Traceback" not in output
    lines = [line for line in output.splitlines() if line.startswith("mailguard: ")]
    assert len(lines) == 1 and "MAILGUARD_UNSUBSCRIBE_URL" in lines[0], output
    with pytest.raises(ValueError, match="must be https://"):
        Settings.from_env({"MAILGUARD_UNSUBSCRIBE_URL": "http://example.org/u"})


def test_a_click_stops_the_next_bulk_mail_and_nothing_else(
    served: tuple[str, dict[str, str]],
) -> None:
    """Through a real WSGI server: GET shows a page whose button POSTs (nothing changes); the
    one-click POST answers 200; the next newsletter to Ada ends dropped/unsubscribed, a login
    code to her is still sent, and ``mailguard suppressed`` shows the entry, why and since."""
    _, env = served
    _, news = _send(env, "newsletter")
    assert news is not None
    link = _link(news)
    status, _, page = _http("GET", link)
    assert status == 200 and '<form method="post"' in page and "news@example.org" in page
    step, _ = _send(env, "newsletter")
    assert step.outcome.status == "sent", "a GET alone unsubscribes nobody"
    status, _, page = _http("POST", link, b"List-Unsubscribe=One-Click")
    assert status == 200 and "Unsubscribed" in page
    step, message = _send(env, "newsletter")
    assert (step.outcome.status, step.outcome.reason) == ("dropped", "unsubscribed")
    assert message is None
    step, code = _send(env, "code")
    assert step.outcome.status == "sent" and code is not None
    shown = CliRunner().invoke(main, ["suppressed", ADA, "--json"], env=env)
    assert shown.exit_code == 0 and ADA.lower() not in shown.output.lower()
    entry = json.loads(shown.output)["unsubscribed"][0]
    assert entry["source"] == "unsubscribed" and "news@example.org" in entry["cause"]
    text = CliRunner().invoke(main, ["suppressed", ADA], env=env).output
    assert "unsubscribed since" in text
    lifted = CliRunner().invoke(main, ["unsuppress", ADA, "--yes"], env=env)
    assert lifted.exit_code == 0, lifted.output
    step, _ = _send(env, "newsletter")
    assert step.outcome.status == "sent", "unsuppress lifts the unsubscription too"


def test_a_forged_token_answers_4xx_and_changes_nothing(
    served: tuple[str, dict[str, str]],
) -> None:
    base, env = served
    _, news = _send(env, "newsletter")
    assert news is not None
    token = _link(news).rsplit("/", 1)[1]
    forged = token[:-3] + ("AAA" if token[-3:] != "AAA" else "BBB")
    for url in (f"{base}/{forged}", f"{base}/nonsense"):
        status, _, _ = _http("POST", url, b"List-Unsubscribe=One-Click")
        assert 400 <= status < 500
    assert _http("POST", _link(news), b"nothing")[0] == 400
    assert _http("PUT", _link(news), b"List-Unsubscribe=One-Click")[0] == 405
    step, _ = _send(env, "newsletter")
    assert step.outcome.status == "sent"


def test_redis_down_answers_503_so_the_mail_client_tries_again() -> None:
    """The endpoint's Redis stopped: the one-click POST answers 503 with Retry-After."""
    own = RedisServer().start()
    try:
        served = _serve(own.url)
        _, env = next(served)
        _, news = _send(env, "newsletter")
        assert news is not None
        own.stop()
        status, headers, _ = _http("POST", _link(news), b"List-Unsubscribe=One-Click")
        assert status == 503 and headers.get("Retry-After") == endpoint.RETRY_AFTER
        served.close()
    finally:
        own.cleanup()


def test_the_same_view_in_a_django_urlconf(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mounted in Django's URLconf, through Django's test client (with CSRF checks on): GET
    shows the page, the one-click POST unsubscribes, a forged token answers 400."""
    env = _env(redis_url, "https://testserver/unsubscribe")
    monkeypatch.setattr(endpoint, "application", endpoint.Application(Settings.from_env(env)))
    _, news = _send(env, "newsletter")
    assert news is not None
    where = _link(news).replace("https://testserver", "")
    with override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["testserver"]):
        client = Client(enforce_csrf_checks=True)
        got = client.get(where)
        assert got.status_code == 200, got.content[:300]
        assert client.post(where[:-2] + "xx", {"List-Unsubscribe": "One-Click"}).status_code == 400
        answer = client.post(where, {"List-Unsubscribe": "One-Click"})
        assert answer.status_code == 200
    step, _ = _send(env, "newsletter")
    assert (step.outcome.status, step.outcome.reason) == ("dropped", "unsubscribed")
