"""The open SMTP sessions of one transport in one process, kept between mails so that one
connection (one TLS handshake, one AUTH) carries several mails.

A session is given back after a mail and handed out again for the next one, unless it has
carried ``max_mails`` mails (then it is closed with ``QUIT``) or has been idle longer than
``idle`` seconds (closed with ``QUIT`` when the next mail comes, and not used). Each thread
takes a session of its own: none is ever shared by two mails at once. A forked process never
uses its parent's sessions (they are forgotten, unclosed, at its first mail: the parent's
connection stays the parent's).

Whether an idle session is still open is asked of its socket, with no round trip
(:func:`quiet`): a server that closes an idle session writes a ``421`` or closes the connection,
and either leaves something to read where a live session after a finished mail has nothing.
The transport asks before it reuses a session.

A session's client (:class:`_SMTP`) is ``smtplib.SMTP`` keeping the reply to DATA, and it
pipelines one mail's transaction (RFC 2920) when the server offers ``PIPELINING``: ``MAIL
FROM``, every ``RCPT TO`` and ``DATA`` go out in one write and their replies are read in order,
one round trip where there were three, the message itself only after the server's ``354``. The
results and exceptions are ``sendmail``'s (the refused recipients; ``SMTPSenderRefused``,
``SMTPRecipientsRefused``, ``SMTPDataError``, a ``421`` closing the connection, any other
refusal followed by ``RSET``), so the transport treats both ways alike. A server that answers
``354`` although no recipient was accepted (RFC 2920 says it must not) is given an empty data
section's end (``.``), so the session stays in step.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import smtplib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mailer.crashpoints import crash_point

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

#: The longest a ``QUIT`` of a session being closed may wait for the server, in seconds.
QUIT_TIMEOUT = 5.0


@dataclass
class Session:
    """One open SMTP connection, ready for a mail (after EHLO, STARTTLS and AUTH).
    ``mails``: how many it carried; ``last_used``: when it was given back (the pool's clock)."""

    client: smtplib.SMTP
    mails: int = 0
    last_used: float = 0.0


class Sessions:
    """Idle sessions of one transport in this process. ``max_mails`` (>= 1) bounds the mails
    one session carries (1: one connection per mail); ``idle`` (seconds) how long a session may
    wait for its next mail. ``clock`` gives seconds (tests pass their own)."""

    def __init__(
        self, *, max_mails: int, idle: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_mails < 1 or idle < 0:
            raise ValueError("need max_mails >= 1 and idle >= 0 seconds")
        self.max_mails = max_mails
        self.idle = idle
        self._clock = clock
        self._lock = threading.Lock()
        self._idle: list[Session] = []
        self._pid = os.getpid()

    def take(self) -> Session | None:
        """An idle session of this process that is within its bounds (the most recently used),
        or None: open a new one. Sessions idle too long are closed on the way."""
        self._forget_if_forked()
        with self._lock:
            now = self._clock()
            expired = [s for s in self._idle if now - s.last_used > self.idle]
            self._idle = [s for s in self._idle if now - s.last_used <= self.idle]
            found = self._idle.pop() if self._idle else None
        for session in expired:
            quit_session(session.client)
        return found

    def give_back(self, session: Session) -> None:
        """``session`` carried one more mail: keep it for the next, or close it (``QUIT``) once
        it carried ``max_mails``, or when it belongs to another process."""
        session.mails += 1
        if session.mails >= self.max_mails or not session.client.sock:
            quit_session(session.client)
            return
        self._forget_if_forked()
        with self._lock:
            session.last_used = self._clock()
            self._idle.append(session)

    def close(self) -> None:
        """Close (``QUIT``) every idle session of this process."""
        self._forget_if_forked()
        with self._lock:
            idle, self._idle = self._idle, []
        for session in idle:
            quit_session(session.client)

    def __len__(self) -> int:
        """The idle sessions of this process."""
        self._forget_if_forked()
        with self._lock:
            return len(self._idle)

    def _forget_if_forked(self) -> None:
        """In a forked child: drop the parent's sessions without a word on their sockets."""
        if os.getpid() != self._pid:
            self._lock = threading.Lock()  # the parent's may have been held at the fork
            self._idle = []
            self._pid = os.getpid()


def quit_session(client: smtplib.SMTP) -> None:
    """Say QUIT (waiting at most :data:`QUIT_TIMEOUT` for the reply) and close; a failure
    here must never turn a delivered mail into a retry."""
    try:
        if client.sock is not None:
            client.sock.settimeout(min(QUIT_TIMEOUT, client.timeout))
        client.quit()
    except (smtplib.SMTPException, OSError):
        pass
    finally:
        client.close()


def quiet(client: smtplib.SMTP) -> bool:
    """Whether the idle ``client``'s server has written nothing since its last reply: the
    session may carry a mail. False when it has (a ``421`` as it closes an idle session), has
    closed or reset the connection, or when there is no socket. Asked of the socket without
    waiting (no command, no round trip); a TLS record that carries no data (a session ticket)
    is read past. A server that dies after this check is found at ``MAIL FROM``."""
    sock = client.sock
    if sock is None:
        return False
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return False  # decrypted data already waiting: written since the last reply
    try:
        if not _readable(sock):
            return True
        timeout = sock.gettimeout()
        sock.settimeout(0)
        try:
            sock.recv(1)  # data (a 421) or b"" (closed): not quiet either way
        except (ssl.SSLWantReadError, BlockingIOError):
            return True  # a TLS record with nothing for the application
        finally:
            sock.settimeout(timeout)
    except (OSError, ValueError):  # reset, a TLS alert, a socket closed under us
        return False
    return False


def _readable(sock: socket.socket) -> bool:
    """Whether ``sock`` has something to read (data, an end of file, an error) right now."""
    if hasattr(select, "poll"):  # any descriptor number, unlike select()
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])


_CRLF = b"\r\n"
# A line of the message that starts with a dot gets another (RFC 5321 4.5.2), as smtplib does.
_LEADING_DOT = re.compile(rb"(?m)^\.")


class _SMTP(smtplib.SMTP):
    """``smtplib.SMTP`` that keeps the reply to DATA, which ``sendmail`` throws away, and
    writes ``MAIL FROM`` and ``RCPT TO`` with the envelope's checked addresses as they are
    (``smtplib``'s own would parse each one again: ``quoteaddr``)."""

    data_reply: tuple[int, bytes] | None = None
    #: True once this mail's message may have reached the server: its ``DATA`` command went
    #: out (one command at a time) or, pipelined, its data did (a failure then may have
    #: delivered it).
    data_started = False

    def mail(self, sender: str, options: Sequence[str] = ()) -> tuple[int, bytes]:
        self._encoding_for(options)
        self.putcmd("mail", f"FROM:<{sender}>{self._options(options)}")
        return self.getreply()

    def rcpt(self, recip: str, options: Sequence[str] = ()) -> tuple[int, bytes]:
        self.putcmd("rcpt", f"TO:<{recip}>{self._options(options)}")
        return self.getreply()

    def _options(self, options: Sequence[str]) -> str:
        return " " + " ".join(options) if options and self.does_esmtp else ""

    def _encoding_for(self, options: Sequence[str]) -> None:
        """UTF-8 commands for an SMTPUTF8 mail; ``SMTPNotSupportedError`` if not offered."""
        if any(option.lower() == "smtputf8" for option in options) and self.does_esmtp:
            if not self.has_extn("smtputf8"):
                raise smtplib.SMTPNotSupportedError("SMTPUTF8 not supported by server")
            self.command_encoding = "utf-8"

    def data(self, msg: ReadableBuffer | str) -> tuple[int, bytes]:
        self.data_started = True
        crash_point("smtp-data")
        reply = super().data(msg)
        crash_point("smtp-accepted")
        self.data_reply = reply
        return reply

    def next_mail(self) -> None:
        """Forget the last mail's state (its DATA reply, SMTPUTF8) before the next one."""
        self.data_reply = None
        self.data_started = False
        self.command_encoding = "ascii"

    def transaction(
        self, sender: str, recipients: list[str], msg: bytes, options: Sequence[str]
    ) -> dict[str, tuple[int, bytes]]:
        """One mail: ``sendmail``'s result (the recipients refused while others were
        accepted) and exceptions, pipelined when the server offers ``PIPELINING``."""
        self.ehlo_or_helo_if_needed()
        if not (self.does_esmtp and self.has_extn("pipelining")):
            return self.sendmail(sender, recipients, msg, mail_options=options)
        sized = [f"size={len(msg)}"] if self.has_extn("size") else []
        sized += options
        self._encoding_for(sized)
        commands = [
            f"MAIL FROM:<{sender}>{self._options(sized)}",
            *(f"RCPT TO:<{recipient}>" for recipient in recipients),
            "DATA",
        ]
        self.send(("\r\n".join(commands) + "\r\n").encode(self.command_encoding))
        replies = self._replies(len(commands))
        (mail_code, mail_text), (data_code, data_text) = replies[0], replies[-1]
        refused = {
            recipient: reply
            for recipient, reply in zip(recipients, replies[1:-1], strict=True)
            if reply[0] not in (250, 251)
        }
        if data_code == 354 and (mail_code != 250 or len(refused) == len(recipients)):
            self.send(b"." + _CRLF)  # a 354 that should not have come: end the empty data
            self.getreply()
        if mail_code != 250:
            self._end(mail_code)
            raise smtplib.SMTPSenderRefused(mail_code, mail_text, sender)
        if len(refused) == len(recipients) or any(code == 421 for code, _ in refused.values()):
            self._end(421 if any(code == 421 for code, _ in refused.values()) else 0)
            raise smtplib.SMTPRecipientsRefused(refused)
        if data_code != 354:
            self._end(data_code)
            raise smtplib.SMTPDataError(data_code, data_text)
        code, text = self._message(msg)
        if code != 250:
            self._end(code)
            raise smtplib.SMTPDataError(code, text)
        return refused

    def _replies(self, count: int) -> list[tuple[int, bytes]]:
        """The replies to ``count`` pipelined commands, in order. A server that closes the
        connection after a ``421`` leaves the later ones unanswered: they are taken as that
        ``421``, so the caller sees the server's reason rather than the closed socket."""
        replies: list[tuple[int, bytes]] = []
        while len(replies) < count:
            try:
                replies.append(self.getreply())
            except smtplib.SMTPServerDisconnected:
                closing = next((r for r in replies if r[0] == 421), None)
                if closing is None:
                    raise
                replies += [closing] * (count - len(replies))
        return replies

    def _message(self, msg: bytes) -> tuple[int, bytes]:
        """After the server's ``354``: the message, dots doubled, and its end; the reply."""
        self.data_started = True
        crash_point("smtp-data")
        quoted = _LEADING_DOT.sub(b"..", msg)
        if not quoted.endswith(_CRLF):
            quoted += _CRLF
        self.send(quoted + b"." + _CRLF)
        reply = self.getreply()
        crash_point("smtp-accepted")
        self.data_reply = reply
        return reply

    def _end(self, code: int) -> None:
        """After a refusal: close on a ``421`` (the server is closing), else ``RSET``."""
        if code == 421:
            self.close()
            return
        with contextlib.suppress(smtplib.SMTPServerDisconnected):
            self.rset()


class _SMTPSSL(smtplib.SMTP_SSL, _SMTP):
    """The implicit-TLS variant, keeping the DATA reply too."""
