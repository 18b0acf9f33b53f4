"""The one-click unsubscribe endpoint (RFC 8058): a WSGI application, and the same view for
Django's URLconf.

.. code-block:: sh

    gunicorn workers.unsubscribe:application      # any WSGI server; MAILGUARD_* as the workers

.. code-block:: python

    # urls.py of a Django project (MAILGUARD_* set)
    from workers.unsubscribe import django_view
    urlpatterns = [path("unsubscribe/<str:token>", django_view)]

The link a bulk mail carries is ``MAILGUARD_UNSUBSCRIBE_URL/<token>``; the token is the last
segment of the path, wherever the application is mounted. What it answers:

- ``POST`` with ``List-Unsubscribe=One-Click`` in the body (the mail client's one click, or
  the page's button): 200, the recipient is unsubscribed from the sender's bulk kinds;
- ``GET`` (a person who followed the link): 200, a small page whose button POSTs; nothing
  changes yet;
- a forged, changed or malformed token: 400, nothing changes; a ``POST`` without
  ``List-Unsubscribe=One-Click``: 400; another method: 405;
- the ledger's Redis down: 503 with ``Retry-After``, so the mail client tries again;
- settings that cannot work (no URL or secret): 500, and one ERROR line naming the variable.

No address is ever shown or logged: the token names the recipient by its keyed hash.
"""

from __future__ import annotations

import html
import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mailer.errors import BackendUnavailable
from mailer.factory import build_unsubscribe
from mailer.settings import Settings
from mailer.suppression import suppressions_for
from mailer.unsubscribe import POST_HEADER, InvalidToken, Unsubscribe

log = logging.getLogger("mailguard")

#: The largest request body read, in bytes (the one-click body is 26).
MAX_BODY = 8192
ONE_CLICK = f"{POST_HEADER[1]}".encode()
_MULTIPART_ONE_CLICK = re.compile(
    rb'name="?List-Unsubscribe"?[^\r\n]*\r?\n(?:[^\r\n]+\r?\n)*\r?\nOne-Click\r?\n'
)
#: Seconds a mail client is asked to wait before it tries again (Redis down).
RETRY_AFTER = "60"

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="robots" content="noindex">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title></head>
<body style="font-family: sans-serif; max-width: 32em; margin: 3em auto">
<h1>{title}</h1><p>{text}</p>{form}</body></html>
"""
_FORM = """<form method="post" action="">
<input type="hidden" name="List-Unsubscribe" value="One-Click">
<button type="submit">Unsubscribe</button></form>"""


@dataclass(frozen=True)
class Answer:
    """An HTTP answer, for any framework: status line, headers, body."""

    status: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


def _page(status: str, title: str, text: str, form: str = "") -> Answer:
    body = _PAGE.format(title=html.escape(title), text=html.escape(text), form=form)
    return Answer(status, body.encode(), (("Content-Type", "text/html; charset=utf-8"),))


def handle(unsubscribe: Unsubscribe, method: str, token: str, body: bytes) -> Answer:
    """The endpoint's answer to ``method`` on ``<base>/<token>`` with ``body`` (see the
    module's table). Framework-free: the WSGI application and the Django view call it."""
    if method not in ("GET", "HEAD", "POST"):
        return Answer("405 Method Not Allowed", b"GET or POST\n", (("Allow", "GET, POST"),))
    try:
        claims = unsubscribe.signer.verify(token)
    except InvalidToken as exc:
        log.warning("unsubscribe refused: %s", exc)
        return _page("400 Bad Request", "Link not valid", "This unsubscribe link is not valid.")
    sender, kind = claims.sender, claims.kind
    if method != "POST":
        text = f"Stop receiving {kind} mail from {sender}?"
        return _page("200 OK", "Unsubscribe", text, _FORM)
    if not asks_one_click(body):
        return _page("400 Bad Request", "Not unsubscribed", "The request asks for no unsubscribe.")
    try:
        unsubscribe.apply(token)
    except BackendUnavailable:
        log.error("unsubscribe from %s not recorded: the ledger's Redis is down (503)", sender)
        answer = _page("503 Service Unavailable", "Try again", "Please try again in a minute.")
        return Answer(answer.status, answer.body, (*answer.headers, ("Retry-After", RETRY_AFTER)))
    log.info(
        "recipient %s unsubscribed from the bulk kinds of %s (%s)",
        claims.recipient,
        sender,
        kind,
        extra={"recipient": claims.recipient, "sender": sender},
    )
    return _page("200 OK", "Unsubscribed", f"You will get no more bulk mail from {sender}.")


def asks_one_click(body: bytes) -> bool:
    """Whether a POST's body says ``List-Unsubscribe=One-Click``: URL-encoded (what mail
    clients send, and the page's form) or a ``multipart/form-data`` field of that name."""
    return ONE_CLICK in body or _MULTIPART_ONE_CLICK.search(body) is not None


def token_of(path: str) -> str:
    """The token in a request's path: its last non-empty segment."""
    return next((part for part in reversed(path.split("/")) if part), "")


class Application:
    """The WSGI application. Built from ``settings`` (default: the ``MAILGUARD_*`` environment,
    read at the first request); thread-safe."""

    def __init__(self, settings: Settings | None = None) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._unsubscribe: Unsubscribe | None = None

    def unsubscribe(self) -> Unsubscribe:
        """The parts, built once; ``ValueError`` (one line) for settings that cannot work."""
        with self._lock:
            if self._unsubscribe is None:
                settings = self._settings or Settings.from_env()
                built = build_unsubscribe(settings, suppressions_for(settings))
                if built is None:
                    raise ValueError(
                        "MAILGUARD_UNSUBSCRIBE_URL and MAILGUARD_SECRET must be set to serve "
                        "unsubscribe links"
                    )
                self._unsubscribe = built
            return self._unsubscribe

    def answer(self, method: str, path: str, body: bytes) -> Answer:
        try:
            unsubscribe = self.unsubscribe()
        except ValueError as exc:
            log.error("mailguard unsubscribe endpoint: %s", exc)
            return Answer("500 Internal Server Error", b"not configured\n")
        return handle(unsubscribe, method, token_of(path), body)

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        answer = self.answer(method, str(environ.get("PATH_INFO", "")), _body(environ))
        headers = [*answer.headers, ("Content-Length", str(len(answer.body)))]
        start_response(answer.status, headers)
        return [b"" if method == "HEAD" else answer.body]


def _body(environ: dict[str, Any]) -> bytes:
    """The request body, at most :data:`MAX_BODY` bytes."""
    try:
        length = min(int(environ.get("CONTENT_LENGTH") or 0), MAX_BODY)
    except ValueError:
        return b""
    stream = environ.get("wsgi.input")
    return stream.read(length) if stream is not None and length > 0 else b""


#: ``workers.unsubscribe:application`` for a WSGI server.
application = Application()


def django_view(request: Any, token: str = "") -> Any:
    """The same endpoint as a Django view: ``path("unsubscribe/<str:token>", django_view)``.
    Exempt from CSRF (a mail client's POST carries no cookie; the signed token is the proof)."""
    from django.http import HttpResponse  # noqa: PLC0415 - Django is optional

    path = token or request.path
    answer = application.answer(request.method or "GET", path, request.body[:MAX_BODY])
    status, _, reason = answer.status.partition(" ")
    response = HttpResponse(answer.body, status=int(status), reason=reason)
    for name, value in answer.headers:
        response[name] = value
    return response


django_view.csrf_exempt = True  # type: ignore[attr-defined]
