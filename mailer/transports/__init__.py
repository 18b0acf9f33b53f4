"""Transports hand a built message to a mail server: SMTP, or memory and console for tests."""

from mailer.transports.base import SendReceipt, Transport
from mailer.transports.console import ConsoleTransport
from mailer.transports.memory import MemoryTransport
from mailer.transports.smtp import SmtpTransport

__all__ = ["ConsoleTransport", "MemoryTransport", "SendReceipt", "SmtpTransport", "Transport"]
