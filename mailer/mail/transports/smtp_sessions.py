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
"""

from __future__ import annotations

import os
import select
import smtplib
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

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
