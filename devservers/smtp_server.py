"""A real SMTP server for the tests: aiosmtpd on 127.0.0.1 that records what it receives.

The handler can be told to answer the next DATA or RCPT commands with an error reply (``451 try
later``, ``550 no``), or the RCPTs of one recipient only (``450 4.2.1`` for a throttled
mailbox), to refuse DATA for good, or to demand a login; it logs when each RCPT and DATA
arrived (``events``), so transport tests exercise
the real SMTP conversation of ``smtplib``, not a mock of it. The server counts the connections
it accepted (``connections``), records each EHLO name (``ehlo_names``) and the client
certificate of each TLS session (``peer_certs``), and can drop its open sessions
(:meth:`SmtpTestServer.drop_sessions`: a relay that closes idle connections).
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import ssl
import subprocess
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any, Literal, cast

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword, Session

from devservers.ports import free_port

#: A relay's refusal of a mail beyond its rate (classified as a sender hold).
SHAPED = "421 4.7.0 Too many messages, slow down"


@dataclass(frozen=True)
class Delivered:
    """One message the server accepted: the envelope and the parsed content."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    content: bytes
    received_at: float = field(default_factory=time.time)  # epoch seconds, the server's clock

    @property
    def message(self) -> EmailMessage:
        parsed = email.message_from_bytes(self.content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


class RecordingHandler:
    """aiosmtpd handler: records delivered messages; plays back planned error replies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.delivered: list[Delivered] = []
        self._data_replies: deque[str] = deque()
        self._rcpt_replies: deque[str] = deque()
        self.permanent_data_reply: str | None = None
        self._data_delays: deque[float] = deque()
        self._data_drops: deque[bool] = deque()  # True: accept the message, then drop
        self.data_commands = 0
        self.data_aborted = 0  # DATA sessions whose client went away before the reply
        self.rcpt_commands = 0
        self._rcpt_replies_for: dict[str, deque[str]] = {}
        #: (epoch seconds, "RCPT" or "DATA", the RCPT's address or "", the reply sent)
        self.events: list[tuple[float, str, str, str]] = []
        #: Called with (address, reply) just before a planned refusal of a RCPT is sent.
        self.on_refusal: Callable[[str, str], None] | None = None
        self.logins: list[tuple[bytes, bytes]] = []
        #: (count, seconds, reply): a RCPT that would make more than ``count`` accepted within
        #: ``seconds`` gets ``reply`` instead (a server that shapes traffic); None: no limit.
        self.rate_limit: tuple[int, float, str] | None = None
        self._accepted: deque[float] = deque()
        #: The name of each EHLO, in order.
        self.ehlo_names: list[str] = []
        #: The client certificate (``getpeercert()``'s dict; {} for none) of each TLS session.
        self.peer_certs: list[dict[str, Any]] = []
        #: How many NOOP and RSET commands arrived.
        self.noop_commands = 0
        self.rset_commands = 0
        self.drops_after_rset = 0  # the next RSETs answered 250, then the connection dropped

    async def handle_EHLO(
        self,
        server: SMTPServer,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        with self._lock:
            self.ehlo_names.append(hostname)
        session.host_name = hostname
        return responses

    async def handle_NOOP(
        self, server: SMTPServer, session: Session, envelope: Envelope, arg: str
    ) -> str:
        with self._lock:
            self.noop_commands += 1
        return "250 OK"

    async def handle_RSET(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        with self._lock:
            self.rset_commands += 1
            drop = self.drops_after_rset > 0
            self.drops_after_rset -= int(drop)
        if drop and server.transport is not None:  # after the 250 went out
            server.loop.call_soon(cast(asyncio.WriteTransport, server.transport).abort)
        return "250 OK"

    def handle_STARTTLS(self, server: SMTPServer, session: Session, envelope: Envelope) -> bool:
        extra = session.ssl or {}
        with self._lock:
            self.peer_certs.append(dict(extra.get("peercert") or {}))
        return True

    async def handle_RCPT(
        self,
        server: SMTPServer,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        with self._lock:
            self.rcpt_commands += 1
            planned = self._rcpt_replies_for.get(address.lower())
            reply = "250 OK"
            if planned:
                reply = planned.popleft()
            elif self._rcpt_replies:
                reply = self._rcpt_replies.popleft()
            now = time.time()
            if reply.startswith("250") and self.rate_limit is not None:
                reply = self._shaped(now, reply)
            self.events.append((now, "RCPT", address, reply))
        if reply.startswith("250"):
            envelope.rcpt_tos.append(address)
        elif self.on_refusal is not None:
            self.on_refusal(address, reply)
        return reply

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        with self._lock:
            self.data_commands += 1
            self.events.append((time.time(), "DATA", "", ""))
            delay = self._data_delays.popleft() if self._data_delays else 0.0
        if delay:
            # A slow server: the client has sent the whole message and waits for the reply. If it
            # goes away meanwhile, aiosmtpd cancels this coroutine: nothing is accepted (a server
            # commits to a message only with its 250 reply, RFC 5321 4.1.1.4).
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                with self._lock:
                    self.data_aborted += 1
                raise
            if server.transport is None or server.transport.is_closing():
                with self._lock:
                    self.data_aborted += 1
                return "451 4.3.0 client gone"
        with self._lock:
            drop = self._data_drops.popleft() if self._data_drops else None
            if drop is not None:
                if drop:  # accepted (committed), but the 250 never reaches the client
                    self._record(envelope)
                if server.transport is not None:  # a socket's transport: it can abort
                    cast(asyncio.WriteTransport, server.transport).abort()
                return "421 4.4.2 connection dropped"
            if self._data_replies:
                return self._data_replies.popleft()
            if self.permanent_data_reply is not None:
                return self.permanent_data_reply
            self._record(envelope)
        return "250 2.0.0 Message accepted for delivery"

    def _shaped(self, now: float, reply: str) -> str:
        """``reply``, or the rate limit's refusal when this RCPT would be one too many (the
        caller holds the lock)."""
        assert self.rate_limit is not None
        count, seconds, refusal = self.rate_limit
        while self._accepted and self._accepted[0] <= now - seconds:
            self._accepted.popleft()
        if len(self._accepted) >= count:
            return refusal
        self._accepted.append(now)
        return reply

    def _record(self, envelope: Envelope) -> None:
        """Keep the message as delivered (the caller holds the lock)."""
        self.delivered.append(
            Delivered(
                mail_from=str(envelope.mail_from),
                rcpt_tos=tuple(envelope.rcpt_tos),
                content=envelope.original_content or b"",
            )
        )

    def drop_data(self, times: int = 1, *, accept: bool = False) -> None:
        with self._lock:
            self._data_drops.extend([accept] * times)

    def reply_to_data(self, reply: str, times: int = 1) -> None:
        with self._lock:
            self._data_replies.extend([reply] * times)

    def delay_data(self, seconds: float, times: int = 1) -> None:
        with self._lock:
            self._data_delays.extend([seconds] * times)

    def reply_to_rcpt(self, reply: str, times: int = 1, *, address: str | None = None) -> None:
        with self._lock:
            if address is None:
                self._rcpt_replies.extend([reply] * times)
            else:
                self._rcpt_replies_for.setdefault(address.lower(), deque()).extend([reply] * times)


@dataclass(frozen=True)
class TestCertificate:
    """A self-signed certificate for 127.0.0.1 made with the ``openssl`` command line tool."""

    __test__ = False  # not a test class, despite the name

    cert: Path
    key: Path

    @classmethod
    def create(cls, directory: Path) -> TestCertificate:
        cert, key = directory / "cert.pem", directory / "key.pem"
        subprocess.run(
            [
                "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                "-keyout", str(key), "-out", str(cert),
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
        return cls(cert=cert, key=key)

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts this certificate (and nothing else)."""
        return ssl.create_default_context(cafile=str(self.cert))


class _ClosingController(Controller):
    """aiosmtpd's ``Controller`` that can close the sessions still open before it stops: its
    own ``stop`` ends the loop with their sockets open, which Python reports later, in whatever
    test is running then, as an unclosed socket (a worker killed mid-session leaves one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sessions: weakref.WeakSet[Any] = weakref.WeakSet()  # used in the loop's thread
        self.connections = 0  # sessions (connections) accepted

    def factory(self) -> Any:
        session = super().factory()  # type: ignore[no-untyped-call]
        self._sessions.add(session)
        self.connections += 1
        return session

    async def close_sessions(self) -> None:
        """Drop every open session's connection (a client keeping its session open between
        mails sees it closed); the sockets are closed on the next turns. A STARTTLS session's
        socket is aborted too: a TLS close would wait for the client's answer."""
        for session in list(self._sessions):
            for name in ("transport", "_original_transport"):
                transport = getattr(session, name, None)
                if transport is not None:
                    transport.abort()
        for _ in range(3):
            await asyncio.sleep(0)


class SmtpTestServer:
    """An aiosmtpd ``Controller`` on 127.0.0.1 with a free port and a :class:`RecordingHandler`.

    ``credentials`` (user, password) makes the server offer AUTH (without TLS only when ``tls``
    is ``None``: local tests) and accept only that pair. ``tls`` is ``"implicit"`` (smtps) or
    ``"starttls"``, with ``cert`` from :meth:`TestCertificate.create`. ``client_ca`` (a CA file)
    makes the TLS server demand a client certificate signed by it. Use as a context manager
    or call ``start`` and ``stop``.
    """

    def __init__(
        self,
        credentials: tuple[str, str] | None = None,
        *,
        tls: Literal["implicit", "starttls"] | None = None,
        cert: TestCertificate | None = None,
        client_ca: Path | None = None,
    ) -> None:
        self.handler = RecordingHandler()
        self.port = free_port()
        self._credentials = credentials
        options: dict[str, Any] = {}
        if credentials is not None:
            # aiosmtpd only knows about STARTTLS; with implicit TLS the session is encrypted
            # from the start, so AUTH must not wait for a STARTTLS that never comes.
            require_tls = tls == "starttls"
            options = {"authenticator": self._authenticate, "auth_require_tls": require_tls}
        if tls is not None:
            if cert is None:
                raise ValueError("a TLS test server needs a TestCertificate")
            context = cert.server_context()
            if client_ca is not None:
                context.verify_mode = ssl.CERT_REQUIRED
                context.load_verify_locations(cafile=str(client_ca))
            options["ssl_context" if tls == "implicit" else "tls_context"] = context
        self.controller = _ClosingController(
            self.handler, hostname="127.0.0.1", port=self.port, ready_timeout=10.0, **options
        )
        self.running = False

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    @property
    def connections(self) -> int:
        """How many connections the server accepted so far."""
        return self.controller.connections

    def drop_sessions(self) -> None:
        """Drop every open connection now, as a relay closes idle ones (its clients find out
        at their next command)."""
        closing = self.controller.close_sessions()
        asyncio.run_coroutine_threadsafe(closing, self.controller.loop).result(timeout=5)

    @property
    def delivered(self) -> list[Delivered]:
        with self.handler._lock:
            return list(self.handler.delivered)

    def start(self) -> SmtpTestServer:
        self.controller.start()
        self.controller.connections = 0  # not the controller's own check that it is up
        self.running = True
        return self

    def stop(self) -> None:
        """Close the sessions still open, then stop the server."""
        if self.running:
            closing = self.controller.close_sessions()
            asyncio.run_coroutine_threadsafe(closing, self.controller.loop).result(timeout=5)
            self.controller.stop()
            self.running = False

    def __enter__(self) -> SmtpTestServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def fail_data(self, reply: str = "451 4.3.0 try later", times: int = 1) -> None:
        """Answer the next ``times`` DATA commands with ``reply`` instead of accepting."""
        self.handler.reply_to_data(reply, times)

    def fail_rcpt(self, reply: str = "451 4.2.1 try later", times: int = 1) -> None:
        """Answer the next ``times`` RCPT commands with ``reply`` instead of accepting."""
        self.handler.reply_to_rcpt(reply, times)

    def fail_rcpt_for(self, address: str, reply: str, times: int = 1) -> None:
        """Answer the next ``times`` RCPT commands for ``address`` (only) with ``reply``."""
        self.handler.reply_to_rcpt(reply, times, address=address)

    def limit_rate(self, count: int, seconds: float = 1.0, reply: str = SHAPED) -> None:
        """From now on, refuse with ``reply`` each RCPT beyond ``count`` accepted within any
        ``seconds`` (the server's own clock): a relay that shapes traffic."""
        with self.handler._lock:
            self.handler.rate_limit = (count, seconds, reply)

    def events(self, command: str | None = None) -> list[tuple[float, str, str, str]]:
        """The RCPT and DATA commands received so far (or those of ``command``), in order:
        (epoch seconds, command, address or "", reply to a RCPT)."""
        with self.handler._lock:
            return [e for e in self.handler.events if command is None or e[1] == command]

    def slow_data(self, seconds: float, times: int = 1) -> None:
        """Wait ``seconds`` before answering the next ``times`` DATA commands.

        A client that disconnects meanwhile has sent nothing: the message is not recorded.
        """
        self.handler.delay_data(seconds, times)

    def drop_connection(self, times: int = 1) -> None:
        """Drop the connection at the next ``times`` DATA commands, before accepting anything."""
        self.handler.drop_data(times)

    def drop_after_reset(self, times: int = 1) -> None:
        """Answer the next ``times`` RSET commands with 250, then drop the connection: a
        session that looked alive dies under the client's next command (MAIL FROM)."""
        with self.handler._lock:
            self.handler.drops_after_rset += times

    def accept_then_drop(self, times: int = 1) -> None:
        """Accept the next ``times`` messages, then drop the connection before the 250 reply:
        the client cannot know the message was accepted (SMTP's at-least-once window)."""
        self.handler.drop_data(times, accept=True)

    def refuse_data(self, reply: str = "550 5.7.1 no") -> None:
        """Answer every DATA command with ``reply`` from now on."""
        self.handler.permanent_data_reply = reply

    def _authenticate(
        self,
        server: SMTPServer,
        session: Session,
        envelope: Envelope,
        mechanism: str,
        auth_data: Any,
    ) -> AuthResult:
        assert self._credentials is not None
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        self.handler.logins.append((auth_data.login, auth_data.password))
        user, password = self._credentials
        ok = auth_data.login == user.encode() and auth_data.password == password.encode()
        return AuthResult(success=ok, handled=False)
