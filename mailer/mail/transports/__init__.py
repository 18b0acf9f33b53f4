"""Transports hand an envelope's message over: SMTP, Amazon SES, Anymail's ESPs, a Django email
backend, or memory and console for tests; :mod:`~mailer.mail.transports.registry` picks one by
name."""

from mailer.mail.envelope import Envelope
from mailer.mail.transports.base import SendReceipt, Transport
from mailer.mail.transports.console import ConsoleTransport
from mailer.mail.transports.memory import MemoryTransport
from mailer.mail.transports.smtp import SmtpTransport

__all__ = [
    "ConsoleTransport",
    "Envelope",
    "MemoryTransport",
    "SendReceipt",
    "SmtpTransport",
    "Transport",
]
