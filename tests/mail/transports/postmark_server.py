"""A stand-in for Postmark's ``POST /email`` API on 127.0.0.1, for the ``anymail`` transport's
tests: a provider's HTTP API is an edge no real part reaches from the test machines (no network
beyond loopback), so this server speaks its shapes and nothing more.

Shapes, from Postmark's API reference (Email API, API overview: HTTP response codes, error
codes): the server token comes in the ``X-Postmark-Server-Token`` header (a wrong one: HTTP 401,
``ErrorCode`` 10); success is HTTP 200 ``{"To", "SubmittedAt", "MessageID", "ErrorCode": 0,
"Message": "OK"}``; a refused request is HTTP 422 with an ``ErrorCode`` (406: every recipient
inactive, with Postmark's sentence naming them; 300: an invalid request); a success may say
"Message accepted, but delivery may be delayed"; too many requests is
HTTP 429 and a failure on Postmark's side HTTP 500 (their bodies are not documented: a short
message here). The answer is chosen by the mail's first ``To`` address; any other address gets
a success.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from email.utils import getaddresses
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: status and body (JSON when ``body`` is not text)."""

    status: int
    body: Any


def inactive(address: str) -> Answer:
    """Postmark's answer when every recipient is inactive (hard bounce, complaint)."""
    return Answer(
        422,
        {
            "ErrorCode": 406,
            "Message": "You tried to send to recipient(s) that have been marked as inactive. "
            f"Found inactive addresses: {address.lower()}. Inactive recipients are ones that "
            "have generated a hard bounce, a spam complaint, or a manual suppression.",
        },
    )


def invalid_request(message: str = "Invalid 'From' address: 'orders@example'.") -> Answer:
    """Postmark's answer to a request it cannot accept (``ErrorCode`` 300)."""
    return Answer(422, {"ErrorCode": 300, "Message": message})


def delayed(address: str, message_id: str) -> Answer:
    """Postmark's success when it accepted the mail but its delivery may be delayed."""
    return Answer(
        200,
        {
            "To": address,
            "SubmittedAt": "2026-11-27T12:00:00.0000000-05:00",
            "MessageID": message_id,
            "ErrorCode": 0,
            "Message": "Message accepted, but delivery may be delayed.",
        },
    )


RATE_LIMITED = Answer(429, {"ErrorCode": 429, "Message": "Rate limit exceeded."})
SERVER_ERROR = Answer(500, "Internal Server Error")
BAD_TOKEN = Answer(
    401,
    {
        "ErrorCode": 10,
        "Message": "The Server Token you provided in the X-Postmark-Server-Token request header "
        "was invalid. Please verify that you are using a valid token.",
    },
)


class PostmarkStub:
    """Postmark's ``/email`` on 127.0.0.1 (a free port), accepting ``token``; a context
    manager. ``answers`` maps a lower-case address to the :class:`Answer` a mail to it gets;
    ``received`` keeps each request's JSON body, ``sent`` the ``MessageID`` of each success."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.answers: dict[str, Answer] = {}
        self.received: list[dict[str, Any]] = []
        self.sent: list[str] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path.rstrip("/") != "/email":
                    self._answer(Answer(404, "Not Found"))
                    return
                given = self.headers.get("X-Postmark-Server-Token")
                self._answer(stub.answer(json.loads(raw), given))

            def _answer(self, answer: Answer) -> None:
                text = answer.body if isinstance(answer.body, str) else json.dumps(answer.body)
                data = text.encode()
                self.send_response(answer.status)
                kind = "text/plain" if isinstance(answer.body, str) else "application/json"
                self.send_header("Content-Type", f"{kind}; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The API's base URL (Anymail's ``POSTMARK_API_URL``)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def answer(self, body: dict[str, Any], token: str | None) -> Answer:
        """The answer to one request with JSON ``body`` and server ``token``."""
        with self._lock:
            self.received.append(body)
        if token != self.token:
            return BAD_TOKEN
        to = getaddresses([str(body.get("To", ""))])
        first = to[0][1].lower() if to else ""
        chosen = self.answers.get(first)
        if chosen is not None:
            return chosen
        message_id = str(uuid.uuid4())
        with self._lock:
            self.sent.append(message_id)
        return Answer(
            200,
            {
                "To": body.get("To", ""),
                "SubmittedAt": "2026-11-27T12:00:00.0000000-05:00",
                "MessageID": message_id,
                "ErrorCode": 0,
                "Message": "OK",
            },
        )

    def requests_to(self, address: str) -> list[dict[str, Any]]:
        """The requests whose ``To`` names ``address``."""
        with self._lock:
            return [b for b in self.received if address.lower() in str(b.get("To", "")).lower()]

    def __enter__(self) -> PostmarkStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
