"""Crash points: a test-only hook that kills the process at one named step of a mail's life.

**For tests only.** ``MAILGUARD_CRASH_AT=<point>`` (or ``<point>:<n>``, the n-th time this
process reaches it; default the first) makes :func:`crash_point` SIGKILL the process there, so
a test proves what happens when a process dies exactly at that step, with no sleep and hope
(``tests/reliability/crash/``; the table is in ``docs/explanation/reliability.md``). A process
that leads its own session (a worker started with ``setsid``, as the suite starts them) kills its
whole process group, pool children included, as a machine or container crash would; any other
process kills itself only.

The variable is read once, at import: in production (unset) a call costs one attribute check.
An unknown point is refused at import with one line naming the known ones. Never set it
outside a test: the process dies.
"""

from __future__ import annotations

import os
import signal

#: Every crash point, in the order of a mail's life (what the process has done when it dies).
POINTS: dict[str, str] = {
    "published": "the producer: the broker took the message (send_mail.delay returned)",
    "popped": "the worker: BRPOP took the message, not yet recorded as unacknowledged",
    "claimed": "a run: the ledger's claim taken, nothing else done",
    "admitted": "a run: admitted by the limiter (slot taken), the transport not yet called",
    "booked": "a run: booked for a later slot, its next run neither parked nor published",
    "smtp-data": "the SMTP transport: recipients accepted, DATA not yet sent",
    "smtp-accepted": "the SMTP transport: the server accepted the data (250), nothing recorded",
    "recorded": "a run: its outcome recorded in the ledger, the result not stored nor acked",
    "parking": "a run: its mail parked in the schedule, its message not yet acknowledged",
    "promoting": "the promoter: due entries taken from the schedule, not yet published",
    "republished": "the promoter or watchdog: entries published, not yet forgotten",
    "cancel": "cancel: the cancellation recorded, the parked entry not yet removed",
}

VARIABLE = "MAILGUARD_CRASH_AT"


def _parse(value: str) -> tuple[str, int]:
    """``point`` or ``point:n`` as (point, n); raises ``ValueError`` (one line) otherwise."""
    name, _, nth = value.strip().partition(":")
    if name not in POINTS:
        raise ValueError(
            f"{VARIABLE}: unknown crash point {name!r} (tests only); one of: {', '.join(POINTS)}"
        )
    if nth and not (nth.isdigit() and int(nth) >= 1):
        raise ValueError(f"{VARIABLE}: {value!r}: the count after ':' must be a whole number >= 1")
    return name, int(nth or 1)


_TARGET: tuple[str, int] | None = _parse(os.environ[VARIABLE]) if os.environ.get(VARIABLE) else None
_seen = [0]  # times this process reached the target point


def crash_point(name: str) -> None:
    """Die here if ``MAILGUARD_CRASH_AT`` names ``name`` (and this is its n-th time in this
    process); otherwise nothing. Tests only: see the module."""
    if _TARGET is None or _TARGET[0] != name:
        return
    _seen[0] += 1
    if _seen[0] == _TARGET[1]:
        _die()


def _die() -> None:
    """SIGKILL the process group when this process's group leads its session (a worker started
    with ``setsid``: main process and pool children die together), else this process alone."""
    if os.getpgrp() == os.getsid(0):
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
