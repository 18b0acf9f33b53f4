"""What the holds gate remembers and labels: the holds a worker has seen (to log each one's end
once), a reply's bounded metrics label, the ``since`` of what a run read."""

from __future__ import annotations

import logging
import threading

from mailer.mail.replies import enhanced_status
from mailer.records.holds import Hold
from mailer.records.holds.pace import Pace

log = logging.getLogger("mailguard")

#: Recipient holds a worker remembers (to log their end once); the oldest are forgotten first.
KNOWN_HOLDS = 1024


class KnownHolds:
    """The holds this worker knows are in force (a scope, ``provider google`` or a recipient's
    hash -> until), to log ``hold ended: <who>`` once when one it knew is read over. Thread-safe;
    at most :data:`KNOWN_HOLDS`, the oldest forgotten first."""

    def __init__(self) -> None:
        self._known: dict[str, float] = {}
        self._lock = threading.Lock()

    def note(self, name: str, who: str, hold: Hold | None) -> None:
        """Remember ``hold`` (in force) under ``name``; None: log once if one was known."""
        with self._lock:
            if hold is not None:
                self._known.pop(name, None)
                self._known[name] = hold.until
                while len(self._known) > KNOWN_HOLDS:
                    del self._known[next(iter(self._known))]
                return
            if self._known.pop(name, None) is None:
                return
        log.info("hold ended: %s", who, extra={"hold": who})


def cause_label(code: int | None, reply: str | None) -> str:
    """A bounded metrics label for a reply: its code and enhanced status (``454 4.7.0``);
    ``provider`` for an API's answer (no SMTP code)."""
    if code is None:
        return "provider"
    status = enhanced_status(reply or "")
    return f"{code} {status}" if status else str(code)


def since(found: Hold | Pace | None) -> float:
    """The ``since`` of a hold or pace read, 0.0 for none (earlier than any stored one)."""
    return 0.0 if found is None else found.since
