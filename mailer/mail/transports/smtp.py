"""SMTP through ``smtplib``, with tenacity retrying what may work on a second try.

Retried: 4xx replies (at connect, MAIL, RCPT or DATA), a dropped connection, connection errors
and timeouts; with ``retry_holds=False`` (a guard with holds on) not the throttling replies
(``454 4.7.0``, ``421``, ``450 4.2.1``: see :mod:`mailer.mail.replies`), which the guard answers
with a hold, since retrying them at once is what makes a provider throttle harder. Never
retried: 5xx replies, TLS certificate errors and missing server features (STARTTLS, SMTPUTF8,
AUTH), because the same try would fail the same way.

Each send opens its own connection and closes it afterwards: simple, and never confused by a
connection the server closed while idle. At a few mails per second per worker the handshake
does not matter; for bulk sending a pooled transport would be the better tool.
"""

from __future__ import annotations

import logging
import smtplib
import ssl
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from mailer.crashpoints import crash_point
from mailer.durations import human
from mailer.errors import PermanentSendError, SendError, TransientSendError, mask_url
from mailer.mail.envelope import Envelope
from mailer.mail.replies import Action, Reaction, temporary
from mailer.mail.transports.base import SendReceipt, mask_addresses, wire_bytes
from mailer.mail.transports.retrying import worth_retrying

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

log = logging.getLogger(__name__)

Security = Literal["plain", "ssl", "starttls"]

_SCHEMES: dict[str, tuple[Security, int]] = {
    "smtp": ("plain", 25),
    "smtps": ("ssl", 465),
    "smtp+starttls": ("starttls", 587),
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class _SMTP(smtplib.SMTP):
    """``smtplib.SMTP`` that keeps the reply to DATA, which ``sendmail`` throws away, and
    writes ``MAIL FROM`` and ``RCPT TO`` with the envelope's checked addresses as they are
    (``smtplib``'s own would parse each one again: ``quoteaddr``)."""

    data_reply: tuple[int, bytes] | None = None

    def mail(self, sender: str, options: Sequence[str] = ()) -> tuple[int, bytes]:
        if any(option.lower() == "smtputf8" for option in options) and self.does_esmtp:
            if not self.has_extn("smtputf8"):
                raise smtplib.SMTPNotSupportedError("SMTPUTF8 not supported by server")
            self.command_encoding = "utf-8"
        self.putcmd("mail", f"FROM:<{sender}>{self._options(options)}")
        return self.getreply()

    def rcpt(self, recip: str, options: Sequence[str] = ()) -> tuple[int, bytes]:
        self.putcmd("rcpt", f"TO:<{recip}>{self._options(options)}")
        return self.getreply()

    def _options(self, options: Sequence[str]) -> str:
        return " " + " ".join(options) if options and self.does_esmtp else ""

    def data(self, msg: ReadableBuffer | str) -> tuple[int, bytes]:
        crash_point("smtp-data")
        reply = super().data(msg)
        crash_point("smtp-accepted")
        self.data_reply = reply
        return reply


class _SMTPSSL(smtplib.SMTP_SSL, _SMTP):
    """The implicit-TLS variant, keeping the DATA reply too."""


class SmtpTransport:
    """Sends each message over a new SMTP connection, retrying transient failures.

    ``security`` is ``"plain"``, ``"ssl"`` (implicit TLS, usually port 465) or ``"starttls"``
    (usually port 587). ``timeout`` is in seconds per socket operation. Retries stop after
    ``max_attempts`` tries or once ``max_delay`` seconds have passed since the first, whichever
    comes first; waits between tries are random exponential (``wait_multiplier`` * 2**n
    seconds at most, capped at ``wait_max``). ``sleep`` is how waiting happens (tests pass a
    function that does not sleep).

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
        self._local_hostname = local_hostname
        self.retry_holds = retry_holds

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
        if parts.scheme not in _SCHEMES:
            raise ValueError(f"bad SMTP URL {shown}: scheme must be smtp, smtps or smtp+starttls")
        if not parts.hostname:
            raise ValueError(f"bad SMTP URL {shown}: no host")
        security, timeout = _url_options(parts.query, _SCHEMES[parts.scheme][0], shown)
        return cls(
            parts.hostname,
            port if port is not None else _SCHEMES[parts.scheme][1],
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

        def attempt() -> tuple[int, str]:
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
            code, reply = retrying(attempt)
        except SendError as exc:
            log.warning("SMTP send of %s failed: %s", message_id, exc)
            raise
        return SendReceipt(message_id=message_id, code=code, reply=reply, attempts=attempts)

    def _attempt(self, envelope: Envelope) -> tuple[int, str]:
        """One try on a fresh connection: the DATA reply, or the ``SendError`` it raised."""
        recipients = list(envelope.recipients)
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
            refused = _send(client, envelope)
            code, text = client.data_reply or (250, b"")
        except (smtplib.SMTPException, OSError) as exc:
            raise smtp_send_error(exc, recipients, "sending") from None
        finally:
            _close(client)
        if refused:
            # Some recipients were refused but others accepted: the mail is out, no retry.
            log.warning(
                "SMTP send of %s: %d recipient(s) refused", envelope.message_id, len(refused)
            )
        return code, mask_addresses(_text(text), recipients)

    def _connect(self) -> _SMTP:
        if self.security == "ssl":
            return _SMTPSSL(
                self.host,
                self.port,
                local_hostname=self._local_hostname,
                timeout=self.timeout,
                context=self._context(),
            )
        return _SMTP(
            self.host, self.port, local_hostname=self._local_hostname, timeout=self.timeout
        )

    def _context(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context


def smtp_send_error(exc: BaseException, recipients: list[str], doing: str) -> SendError:
    """An ``smtplib`` or socket error as a transient or permanent ``SendError`` (``doing``
    names the step in its text; ``recipients`` are masked in it). Also for transports that reach
    SMTP through another library (Django's SMTP backend).

    A fault of our own side that every mail would meet carries the reaction ``HOLD_TRANSPORT``
    (the guard holds the transport, not the mail): a certificate the system does not trust, a
    TLS handshake refused (not a connection lost during it), a server without the STARTTLS or
    AUTH we ask for; an authentication reply (``535``, ``534``, ``530``) gets it from its code
    (:func:`mailer.mail.replies.reaction_to_reply`)."""
    code: int | None = None
    text = ""
    reaction: Reaction | None = None
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        replies = list(exc.recipients.values())
        code, raw = max(replies, key=lambda r: r[0]) if replies else (550, b"")
        text = _text(raw)
        transient = temporary(code)
        reason = f"{doing}: the server {'deferred' if transient else 'refused'} the recipient"
    elif isinstance(exc, smtplib.SMTPResponseException):
        code, text = exc.smtp_code, _text(exc.smtp_error)
        transient = temporary(code)
        verb = "deferred" if transient else "refused"
        reason = f"{doing}: the server {verb} ({type(exc).__name__})"
    else:
        detail = f"{type(exc).__name__}: {exc}"
        # Missing STARTTLS, SMTPUTF8 or AUTH support, or an untrusted certificate, is a
        # configuration problem that a retry would only repeat.
        transient = isinstance(exc, smtplib.SMTPServerDisconnected) or not isinstance(
            exc, (smtplib.SMTPException, ssl.SSLCertVerificationError)
        )
        reason = f"{doing}: {detail}"
        lost = (ssl.SSLEOFError, ssl.SSLZeroReturnError)  # a connection lost, not refused
        refused_tls = isinstance(exc, ssl.SSLError) and not isinstance(exc, lost)
        missing = isinstance(exc, smtplib.SMTPNotSupportedError) and any(
            word in str(exc) for word in ("STARTTLS", "AUTH")
        )
        if refused_tls or missing:
            reaction = Reaction(Action.HOLD_TRANSPORT)
    reason = mask_addresses(reason, recipients)
    text = mask_addresses(text, recipients)
    error = TransientSendError if transient else PermanentSendError
    return error(reason, code=code, reply=text, reaction=reaction)


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def _close(client: smtplib.SMTP) -> None:
    """Say QUIT and close; a failure here must not turn a delivered mail into a retry."""
    try:
        client.quit()
    except (smtplib.SMTPException, OSError):
        pass
    finally:
        client.close()


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


def _url_options(query: str, security: Security, shown: str) -> tuple[Security, float]:
    """The SMTP URL's ``starttls`` and ``timeout`` options: (security, timeout in seconds)."""
    timeout = 30.0
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == "starttls":
            if value.lower() in _TRUE:
                if security == "ssl":
                    raise ValueError(f"bad SMTP URL {shown}: smtps already uses TLS, drop starttls")
                security = "starttls"
            elif value.lower() not in _FALSE:
                raise ValueError(f"bad SMTP URL {shown}: starttls must be 1 or 0")
        elif key == "timeout":
            try:
                timeout = float(value)
            except ValueError:
                raise ValueError(f"bad SMTP URL {shown}: timeout must be seconds") from None
            if not 0 < timeout < float("inf"):
                raise ValueError(f"bad SMTP URL {shown}: timeout must be positive seconds")
        else:
            raise ValueError(f"bad SMTP URL {shown}: unknown option {key!r} (starttls, timeout)")
    return security, timeout


def _send(client: _SMTP, envelope: Envelope) -> dict[str, object]:
    """``sendmail`` from the envelope's sender to its recipients, with SMTPUTF8 when an
    envelope address needs it; the message without its ``Bcc`` header and without rewriting a
    body line that starts ``From `` (as Django's SMTP backend sends ``as_bytes()``)."""
    international = envelope.smtputf8
    options = ("SMTPUTF8", "BODY=8BITMIME") if international else ()
    data = wire_bytes(envelope.message, utf8=international)
    refused = client.sendmail(
        envelope.sender, list(envelope.recipients), data, mail_options=options
    )
    return dict(refused)
