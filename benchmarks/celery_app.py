"""The Celery app for the guard benchmark: mailguard's app plus an unguarded task to compare with.

``celery -A benchmarks.celery_app worker`` runs ``mailguard.send_mail`` exactly as
``workers.app`` does, and also ``bench.unguarded``: the same message built with
:func:`mailer.mail.message.build_message` and sent through the same transport kind (built from the
same settings, one per pool process), with no validation, limiter or ledger. It lives here, not
in the product.

With ``BENCH_TIMINGS_DIR`` set, each pool process appends one line per mail to
``<dir>/<pid>.txt`` (one unbuffered ``write``): ``<kind> <mail id> total=<s> <part>=<s> ...``.
For ``send_mail`` (kind ``guarded``) ``total`` is the time inside ``Guard.process`` and the parts
the time within it in the transport's ``send``, ``build_message``, ``Limiter.acquire`` and each
ledger method (summed over its calls; ``n.<part>`` counts them); for ``bench.unguarded``
``total`` is the task body, with ``build`` and ``send``.
Wrapping costs a few ``perf_counter`` calls per mail, on both sides.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

from celery import Task

import mailer.guard.validate
import workers.tasks
from mailer.factory import build_transport
from mailer.guard import Guard
from mailer.limits.limiter import Limiter
from mailer.mail.envelope import envelope_of
from mailer.mail.message import Mail, build_message
from mailer.mail.transports import ConsoleTransport, MemoryTransport, SmtpTransport
from mailer.mail.transports.base import Transport
from mailer.outcomes import Outcome
from mailer.records.ledger import MemoryLedger, RedisLedger
from workers.app import app, settings
from workers.tasks import GuardedTask

__all__ = ["app", "unguarded", "workers"]

TIMINGS_DIR = os.environ.get("BENCH_TIMINGS_DIR")

#: Seconds spent in each measured part during the current mail (one task at a time per process).
_spent: dict[str, float] = {}
_clock = time.perf_counter


def _timed(part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = _clock()
        try:
            return fn(*args, **kwargs)
        finally:
            _spent[part] = _spent.get(part, 0.0) + (_clock() - start)
            _spent[f"n.{part}"] = _spent.get(f"n.{part}", 0) + 1

    return wrapper


def _emit(kind: str, mail_id: str, total: float) -> None:
    if TIMINGS_DIR is None:
        return
    parts = " ".join(f"{part}={value:.9g}" for part, value in _spent.items())
    line = f"{kind} {mail_id} total={total:.9f} {parts}\n"
    fd = os.open(
        os.path.join(TIMINGS_DIR, f"{os.getpid()}.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND
    )
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _instrument() -> None:
    for cls in (MemoryTransport, ConsoleTransport, SmtpTransport):
        cls.send = _timed("send", cls.send)  # type: ignore[method-assign]
    mailer.guard.validate.build_message = _timed("build", mailer.guard.validate.build_message)  # type: ignore[attr-defined]
    Limiter.acquire = _timed("acquire", Limiter.acquire)  # type: ignore[method-assign]
    for ledger in (RedisLedger, MemoryLedger):
        for name in ("begin", "begin_riding", "record", "unclaim"):
            if hasattr(ledger, name):
                setattr(ledger, name, _timed(f"ledger.{name}", getattr(ledger, name)))
    process = Guard.process

    @functools.wraps(process)
    def timed_process(self: Guard, request: Any, progress: Any = None) -> Any:
        _spent.clear()
        start = _clock()
        try:
            return process(self, request, progress)
        finally:
            _emit("guarded", request.mail_id, _clock() - start)

    Guard.process = timed_process  # type: ignore[method-assign]


if TIMINGS_DIR is not None:
    _instrument()

_build_message = _timed("build", build_message) if TIMINGS_DIR is not None else build_message
_transport: Transport | None = None
_transport_pid = 0


def transport() -> Transport:
    """This process's transport, built like the guard's (after the prefork pool forked)."""
    global _transport, _transport_pid
    if _transport is None or _transport_pid != os.getpid():
        _transport, _transport_pid = build_transport(settings), os.getpid()
    return _transport


@app.task(
    bind=True,
    base=GuardedTask,
    name="bench.unguarded",
    acks_late=True,
    reject_on_worker_lost=True,
)
def unguarded(self: Task, to: str, subject: str, body: str) -> dict[str, Any]:
    """Build and send one mail with no guard at all; return an outcome dict like ``send_mail``."""
    _spent.clear()
    start = _clock()
    mail_id = self.request.id
    now = time.time()
    mail = Mail(to=to, subject=subject, body=body, mail_id=mail_id, sender=settings.sender)
    message = _build_message(mail, now=now)
    receipt = transport().send(envelope_of(mail, message))
    result = Outcome(
        status="sent",
        mail_id=mail_id,
        kind="default",
        attempts=receipt.attempts,
        smtp_code=receipt.code,
        smtp_reply=receipt.reply,
        message_id=receipt.message_id,
        decided_at=now,
        sent_at=time.time(),
    ).as_dict()
    _emit("unguarded", mail_id, _clock() - start)
    return result
