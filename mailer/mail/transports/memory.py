"""An in-memory transport for tests: it keeps every envelope it was given."""

from __future__ import annotations

import threading
from email.message import EmailMessage

from mailer.errors import PermanentSendError, TransientSendError
from mailer.mail.envelope import Envelope
from mailer.mail.replies import temporary
from mailer.mail.transports.base import RefusedRecipient, SendReceipt


class MemoryTransport:
    """Stores sent envelopes in a list, thread-safely; can be told to fail the next sends.

    For tests and demos only: nothing leaves the process, and the list grows without bound.
    :meth:`refuse_recipient` makes it refuse one address at "RCPT" as a server would (the
    receipt's ``refused``; every recipient refused: the send fails with the highest code).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: list[Envelope] = []
        self._failures: list[tuple[bool, int, str]] = []
        self._refusals: dict[str, list[tuple[int, str]]] = {}
        self.attempts = 0

    def send(self, envelope: Envelope) -> SendReceipt:
        """Store ``envelope`` and return a 250 receipt, or raise the next planned failure."""
        with self._lock:
            self.attempts += 1
            if self._failures:
                permanent, code, reply = self._failures.pop(0)
                if permanent:
                    raise PermanentSendError(
                        "memory transport refused the message", code=code, reply=reply
                    )
                raise TransientSendError(
                    "memory transport deferred the message", code=code, reply=reply
                )
            refused = self._refused(envelope)
            if refused and len(refused) == len(envelope.recipients):
                code, reply = max((r.code, r.reply) for r in refused)
                error = TransientSendError if temporary(code) else PermanentSendError
                raise error("memory transport refused the recipient", code=code, reply=reply)
            self._sent.append(envelope)
        return SendReceipt(
            message_id=envelope.message_id, code=250, reply="OK: kept in memory", refused=refused
        )

    def _refused(self, envelope: Envelope) -> tuple[RefusedRecipient, ...]:
        """The envelope's recipients refused this time (each planned refusal used once)."""
        refused = []
        for address in envelope.recipients:
            planned = self._refusals.get(address.lower())
            if planned:
                code, reply = planned.pop(0)
                refused.append(RefusedRecipient(address, code, reply))
        return tuple(refused)

    def refuse_recipient(
        self, address: str, code: int = 550, reply: str = "5.1.1 user unknown", times: int = 1
    ) -> None:
        """Refuse ``address`` (any case) at "RCPT" in the next ``times`` sends that name it."""
        with self._lock:
            self._refusals.setdefault(address.lower(), []).extend([(code, reply)] * times)

    def fail_next(
        self, count: int = 1, *, permanent: bool = False, code: int | None = None, reply: str = ""
    ) -> None:
        """Make the next ``count`` sends fail: 451 transient by default, 550 with ``permanent``."""
        if count < 0:
            raise ValueError("count must not be negative")
        code = code if code is not None else (550 if permanent else 451)
        reply = reply or ("no such user" if permanent else "try again later")
        with self._lock:
            self._failures.extend([(permanent, code, reply)] * count)

    @property
    def sent(self) -> list[EmailMessage]:
        """The messages sent so far, oldest first (a new list)."""
        with self._lock:
            return [envelope.message for envelope in self._sent]

    @property
    def envelopes(self) -> list[Envelope]:
        """The envelopes sent so far (message, sender, recipients), oldest first (a new list)."""
        with self._lock:
            return list(self._sent)

    def clear(self) -> None:
        """Forget the sent messages, the planned failures and the attempt count."""
        with self._lock:
            self._sent.clear()
            self._failures.clear()
            self._refusals.clear()
            self.attempts = 0
