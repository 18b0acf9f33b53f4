"""The SMTP client of :class:`~mailer.mail.transports.smtp.SmtpTransport`: ``smtplib.SMTP``
keeping the reply to DATA, and one mail's transaction pipelined (RFC 2920) when the server
offers ``PIPELINING``.

Pipelined, ``MAIL FROM``, every ``RCPT TO`` and ``DATA`` go out in one write and their replies
are read in order: one round trip where there were two or more, and the message itself only
after the server's ``354``. The results and exceptions are ``sendmail``'s (the refused
recipients; ``SMTPSenderRefused``, ``SMTPRecipientsRefused``, ``SMTPDataError``, a ``421``
closing the connection, any other refusal followed by ``RSET``), so the transport treats both
ways alike. A server that answers ``354`` although no recipient was accepted (RFC 2920 says it
must not) is given an empty data section's end (``.``), so the session stays in step.
"""

from __future__ import annotations

import contextlib
import re
import smtplib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mailer.crashpoints import crash_point

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

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
