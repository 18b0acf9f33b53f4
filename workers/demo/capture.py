"""The demo's SMTP server: aiosmtpd on 127.0.0.1 (a free port) counting what the worker sends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections import Counter

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import Envelope, Session

from workers.demo.story import DemoError


class _Capture:
    """aiosmtpd handler: accepts every message, counts them per recipient address and keeps
    when each address first received one (epoch seconds)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: Counter[str] = Counter()
        self._first: dict[str, float] = {}

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        now = time.time()
        with self._lock:
            for rcpt in envelope.rcpt_tos:
                self._received[rcpt.lower()] += 1
                self._first.setdefault(rcpt.lower(), now)
        return "250 2.0.0 captured by the mailguard demo"

    def received(self) -> Counter[str]:
        with self._lock:
            return Counter(self._received)

    def first_received(self) -> dict[str, float]:
        with self._lock:
            return dict(self._first)


class SmtpCapture:
    """An aiosmtpd server on 127.0.0.1, a free port, counting what it receives per address."""

    def __init__(self) -> None:
        self.handler = _Capture()
        self.controller: Controller | None = None

    @property
    def url(self) -> str:
        assert self.controller is not None
        return f"smtp://127.0.0.1:{self.controller.port}"

    def start(self) -> SmtpCapture:
        logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd logs peers at INFO
        for _ in range(5):
            controller = Controller(
                self.handler, hostname="127.0.0.1", port=_free_port(), ready_timeout=10.0
            )
            try:
                controller.start()
            except (OSError, RuntimeError):  # the port was taken in between: try another
                continue
            self.controller = controller
            return self
        raise DemoError("cannot start the SMTP server on 127.0.0.1")

    def stop(self) -> None:
        if self.controller is not None:
            with contextlib.suppress(RuntimeError, asyncio.CancelledError):
                self.controller.stop()
            self.controller = None

    def received(self) -> Counter[str]:
        """How many mails each address received."""
        return self.handler.received()

    def first_received(self) -> dict[str, float]:
        """When each address received its first mail, epoch seconds."""
        return self.handler.first_received()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
