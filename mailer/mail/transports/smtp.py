"""SMTP through ``smtplib``, with tenacity retrying what may work on a second try.

Retried: 4xx replies (at connect, MAIL, RCPT or DATA), a dropped connection, connection errors
and timeouts; with ``retry_holds=False`` (a guard with holds on) not the throttling replies
(``454 4.7.0``, ``421``, ``450 4.2.1``: see :mod:`mailer.mail.replies`), which the guard answers
with a hold, since retrying them at once is what makes a provider throttle harder. Never
retried: 5xx replies, TLS certificate errors and missing server features (STARTTLS, SMTPUTF8,
AUTH), because the same try would fail the same way.

One connection carries several mails (:mod:`mailer.mail.transports.smtp_sessions`: at most
``session_mails`` mails, idle at most ``session_idle`` seconds), so the TLS handshake and AUTH
are paid once per session, not per mail. A session the server closed while idle is found
before the next mail without a command (its socket has a ``421`` or an end of file to read:
:func:`~mailer.mail.transports.smtp_sessions.quiet`, no ``RSET`` round trip) and replaced by a
fresh connection at once; so is one that dies before the mail's data began (nothing of the
mail was accepted). One that dies after it began is today's rule for any connection: retried,
with the caveat of the class. A server that offers ``PIPELINING`` gets a mail's ``MAIL FROM``,
``RCPT TO`` and ``DATA`` in one write (:mod:`mailer.mail.transports.smtp_sessions`): one round
trip where there were three, the same outcomes.
"""

from __future__ import annotations

import logging
import smtplib
import socket
import ssl
import time
import weakref
from collections.abc import Callable
from urllib.parse import unquote, urlsplit

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from mailer import defaults
from mailer.durations import human
from mailer.errors import PermanentSendError, SendError, mask_url
from mailer.mail.envelope import Envelope
from mailer.mail.transports.base import (
    RefusedRecipient,
    SendReceipt,
    mask_addresses,
    wire_bytes,
)
from mailer.mail.transports.retrying import worth_retrying
from mailer.mail.transports.smtp_errors import smtp_send_error, text_of
from mailer.mail.transports.smtp_sessions import (
    _SMTP,
    _SMTPSSL,
    Session,
    Sessions,
    quiet,
    quit_session,
)
from mailer.mail.transports.smtp_tls import warn_unverified
from mailer.mail.transports.smtp_url import SCHEMES, Security, url_options

log = logging.getLogger(__name__)


class _Stale(Exception):
    """A reused session died before the mail's DATA began: nothing of the mail went out."""


class SmtpTransport:
    """Sends messages over SMTP sessions kept open between mails, retrying transient failures.

    ``security`` is ``"plain"``, ``"ssl"`` (implicit TLS, usually port 465) or ``"starttls"``
    (usually port 587). ``timeout`` is in seconds per socket operation. Retries stop after
    ``max_attempts`` tries or once ``max_delay`` seconds have passed since the first, whichever
    comes first; waits between tries are random exponential (``wait_multiplier`` * 2**n
    seconds at most, capped at ``wait_max``). ``sleep`` is how waiting happens (tests pass a
    function that does not sleep).

    ``ssl_context`` is this transport's TLS context (:func:`~mailer.mail.transports.smtp_tls.
    client_context`; default: the system's trust, verified); ``local_hostname`` the EHLO name
    (default ``socket.getfqdn()``). ``session_mails`` bounds the mails one connection carries
    (1: a connection per mail), ``session_idle`` (seconds) how long a connection may wait for
    its next mail; ``clock`` (seconds) is what idleness is measured on. Sessions are this
    process's: a forked child opens its own.

    Caveats: if the connection drops after the message data went out but before the server
    answered, the retry may deliver the mail a second time; SMTP gives no way to know. With
    ``security="plain"`` a username and password travel unencrypted: use ``ssl`` or
    ``starttls`` for any server that is not on the same host.
    """

    def __init__(
        self,
        host: str,
        port: int | None = None,
        *,
        security: Security = "plain",
        username: str | None = None,
        password: str | None = None,
        timeout: float = 30.0,
        max_attempts: int = 5,
        max_delay: float = 120.0,
        wait_multiplier: float = 0.5,
        wait_max: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        ssl_context: ssl.SSLContext | None = None,
        local_hostname: str | None = None,
        retry_holds: bool = True,
        session_mails: int = defaults.SMTP_SESSION_MAILS,
        session_idle: float = defaults.SMTP_SESSION_IDLE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if security not in ("plain", "ssl", "starttls"):
            raise ValueError(f"security must be 'plain', 'ssl' or 'starttls', got {security!r}")
        if not host:
            raise ValueError("SMTP host is empty")
        if max_attempts < 1 or max_delay < 0 or timeout <= 0:
            raise ValueError("need max_attempts >= 1, max_delay >= 0 and timeout > 0")
        self.host = host
        self.port = (
            port if port is not None else {"plain": 25, "ssl": 465, "starttls": 587}[security]
        )
        self.security: Security = security
        self.username = username
        self._password = password
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.max_delay = max_delay
        self._wait = wait_random_exponential(multiplier=wait_multiplier, max=wait_max)
        self._sleep = sleep
        self._ssl_context = ssl_context
        self.local_hostname = local_hostname or socket.getfqdn()
        self.retry_holds = retry_holds
        self.sessions = Sessions(max_mails=session_mails, idle=session_idle, clock=clock)
        weakref.finalize(self, self.sessions.close)  # QUIT the idle sessions at exit
        unverified = ssl_context is not None and ssl_context.verify_mode == ssl.CERT_NONE
        if unverified and security != "plain":
            warn_unverified(f"{self.host}:{self.port}")

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        max_attempts: int = 5,
        max_delay: float = 120.0,
        wait_multiplier: float = 0.5,
        wait_max: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        ssl_context: ssl.SSLContext | None = None,
        local_hostname: str | None = None,
        retry_holds: bool = True,
        session_mails: int = defaults.SMTP_SESSION_MAILS,
        session_idle: float = defaults.SMTP_SESSION_IDLE,
    ) -> SmtpTransport:
        """Build a transport from ``smtp://[user:password@]host[:port][?starttls=1&timeout=10]``.

        Schemes: ``smtp://`` (port 25), ``smtps://`` (implicit TLS, 465) and
        ``smtp+starttls://`` (587), or ``smtp://...?starttls=1``. User and password are
        URL-decoded (write ``%40`` for ``@``). ``timeout`` is in seconds (default 30). Raises
        ``ValueError`` with the password masked.
        """
        shown = mask_url(url)
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise ValueError(
                f"bad SMTP URL {shown}: cannot parse it (is the port a number?)"
            ) from None
        if parts.scheme not in SCHEMES:
            raise ValueError(f"bad SMTP URL {shown}: scheme must be smtp, smtps or smtp+starttls")
        if not parts.hostname:
            raise ValueError(f"bad SMTP URL {shown}: no host")
        security, timeout = url_options(parts.query, SCHEMES[parts.scheme][0], shown)
        return cls(
            parts.hostname,
            port if port is not None else SCHEMES[parts.scheme][1],
            security=security,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password is not None else None,
            timeout=timeout,
            max_attempts=max_attempts,
            max_delay=max_delay,
            wait_multiplier=wait_multiplier,
            wait_max=wait_max,
            sleep=sleep,
            ssl_context=ssl_context,
            local_hostname=local_hostname,
            retry_holds=retry_holds,
            session_mails=session_mails,
            session_idle=session_idle,
        )

    def __repr__(self) -> str:
        user = f"{self.username}:***@" if self.username else ""
        return f"SmtpTransport({self.security} {user}{self.host}:{self.port})"

    def send(self, envelope: Envelope) -> SendReceipt:
        """Send the envelope's message to its recipients; see the class for what is retried.

        Returns the receipt of the DATA reply. Raises
        :class:`~mailer.errors.TransientSendError` when retries ran out and
        :class:`~mailer.errors.PermanentSendError` on a 5xx reply or a misconfiguration.
        Neither message contains a recipient address or the password.
        """
        message_id = envelope.message_id
        if not envelope.recipients:
            raise PermanentSendError("the envelope has no recipient", attempts=0)
        attempts = 0

        def attempt() -> tuple[int, str, tuple[RefusedRecipient, ...]]:
            nonlocal attempts
            attempts += 1
            try:
                return self._attempt(envelope)
            except SendError as exc:
                exc.attempts = attempts
                raise

        retrying = Retrying(
            stop=stop_after_attempt(self.max_attempts) | stop_after_delay(self.max_delay),
            wait=self._wait,
            retry=retry_if_exception(lambda exc: worth_retrying(exc, retry_holds=self.retry_holds)),
            sleep=self._sleep,
            reraise=True,
            before_sleep=lambda state: _log_retry(state, message_id),
        )
        try:
            code, reply, refused = retrying(attempt)
        except SendError as exc:
            log.warning("SMTP send of %s failed: %s", message_id, exc)
            raise
        return SendReceipt(
            message_id=message_id, code=code, reply=reply, attempts=attempts, refused=refused
        )

    def close(self) -> None:
        """Close (``QUIT``) this process's idle sessions; the next mail opens a new one."""
        self.sessions.close()

    def _attempt(self, envelope: Envelope) -> tuple[int, str, tuple[RefusedRecipient, ...]]:
        """One try: on an idle session (if :func:`quiet`), else, or when that session
        turns out dead before the mail's DATA, on a fresh connection. The DATA reply and the
        recipients refused at RCPT while others were accepted, or the ``SendError`` it
        raised."""
        recipients = list(envelope.recipients)
        session = self.sessions.take()
        if session is not None:
            try:
                return self._on(session, envelope, recipients, reused=True)
            except _Stale:
                log.debug("SMTP session to %s:%s was closed; opening another", self.host, self.port)
        return self._on(self._open(recipients), envelope, recipients, reused=False)

    def _open(self, recipients: list[str]) -> Session:
        """A new session: connected, with STARTTLS and AUTH done as configured."""
        try:
            client = self._connect()
        except (smtplib.SMTPException, OSError) as exc:
            doing = f"connecting to {self.host}:{self.port}"
            raise smtp_send_error(exc, recipients, doing) from None
        try:
            if self.security == "starttls":
                client.starttls(context=self._context())
            if self.username is not None:
                client.login(self.username, self._password or "")
        except (smtplib.SMTPException, OSError) as exc:
            quit_session(client)
            raise smtp_send_error(exc, recipients, "sending") from None
        return Session(client)

    def _on(
        self, session: Session, envelope: Envelope, recipients: list[str], *, reused: bool
    ) -> tuple[int, str, tuple[RefusedRecipient, ...]]:
        """The mail on ``session``; the session is kept for the next mail unless it failed.
        ``_Stale`` when a reused session died before DATA began (the caller opens another)."""
        client = session.client
        assert isinstance(client, _SMTP)
        client.next_mail()
        if reused and not quiet(client):
            quit_session(client)
            raise _Stale
        try:
            refused = _send(client, envelope)
            code, text = client.data_reply or (250, b"")
        except (smtplib.SMTPException, OSError) as exc:
            if _answered(exc) and client.sock is not None:
                self.sessions.give_back(session)  # a reply ends the transaction, not the session
            else:
                quit_session(client)
                if reused and not client.data_started and _dropped(exc):
                    raise _Stale from None
            raise smtp_send_error(exc, recipients, "sending") from None
        self.sessions.give_back(session)
        if refused:
            # Some recipients were refused but others accepted: the mail is out, no retry here
            # (the guard records each refused one and retries a deferred one alone).
            log.info("SMTP send of %s: %d recipient(s) refused", envelope.message_id, len(refused))
        return code, mask_addresses(text_of(text), recipients), _refused(refused, recipients)

    def _connect(self) -> _SMTP:
        if self.security == "ssl":
            return _SMTPSSL(
                self.host,
                self.port,
                local_hostname=self.local_hostname,
                timeout=self.timeout,
                context=self._context(),
            )
        return _SMTP(self.host, self.port, local_hostname=self.local_hostname, timeout=self.timeout)

    def _context(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context


def _refused(
    refused: dict[str, tuple[int, bytes]], recipients: list[str]
) -> tuple[RefusedRecipient, ...]:
    """``sendmail``'s refused recipients (address: (code, reply)), their replies masked."""
    return tuple(
        RefusedRecipient(address, code, mask_addresses(text_of(raw), recipients))
        for address, (code, raw) in refused.items()
    )


def _dropped(exc: BaseException) -> bool:
    """True when the connection failed under the command (no reply came)."""
    return isinstance(exc, (smtplib.SMTPServerDisconnected, OSError))


def _answered(exc: BaseException) -> bool:
    """True when the server answered (a reply that ends the transaction, the session still
    usable), not when the connection failed or the server is closing it (421)."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return all(code != 421 for code, _ in exc.recipients.values())
    return isinstance(exc, smtplib.SMTPResponseException) and exc.smtp_code != 421


def _log_retry(state: RetryCallState, message_id: str | None) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    log.warning(
        "SMTP send of %s failed on attempt %d (%s); retrying in %s",
        message_id,
        state.attempt_number,
        error,
        human(wait),
    )


def _send(client: _SMTP, envelope: Envelope) -> dict[str, tuple[int, bytes]]:
    """The transaction (``sendmail``'s, pipelined where offered) from the envelope's sender to
    its recipients, with SMTPUTF8 when an envelope address needs it; the message without its
    ``Bcc`` header and without rewriting a body line that starts ``From `` (as Django's SMTP
    backend sends ``as_bytes()``)."""
    international = envelope.smtputf8
    options = ("SMTPUTF8", "BODY=8BITMIME") if international else ()
    data = wire_bytes(envelope.message, utf8=international)
    return client.transaction(envelope.sender, list(envelope.recipients), data, options)
