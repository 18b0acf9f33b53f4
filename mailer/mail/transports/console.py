"""A development transport that prints one line per message instead of sending it."""

from __future__ import annotations

import sys
import threading
from typing import TextIO

from mailer.mail.envelope import Envelope
from mailer.mail.transports.base import SendReceipt, recipient_hash


class ConsoleTransport:
    """Prints ``Message-ID``, a hash of each recipient and the subject to ``stream``.

    For development: nothing is delivered, and addresses are never printed in clear (see
    :func:`~mailer.mail.transports.base.recipient_hash` for how little the hash hides). ``stream``
    defaults to standard output at the time of each send.
    """

    def __init__(self, stream: TextIO | None = None, *, max_subject: int = 80) -> None:
        self._stream = stream
        self._max_subject = max_subject
        self._lock = threading.Lock()

    def send(self, envelope: Envelope) -> SendReceipt:
        """Print the summary line and return a 250 receipt."""
        message_id = envelope.message_id
        to = ",".join(recipient_hash(a) for a in envelope.recipients) or "-"
        subject = str(envelope.message.get("Subject", ""))
        if len(subject) > self._max_subject:
            subject = subject[: self._max_subject - 1] + "…"
        line = f"mailguard console: message-id={message_id} to={to} subject={subject!r}\n"
        stream = self._stream if self._stream is not None else sys.stdout
        with self._lock:
            stream.write(line)
            stream.flush()
        return SendReceipt(message_id=message_id, code=250, reply="OK: printed")
