"""Parking a deferred mail: its task message goes to the schedule (:mod:`mailer.schedule`).

The payload is the message a promoter publishes again, as JSON: ``{"v": 1, "args": [...],
"kwargs": {...}, "due": <epoch s>}``, with ``"task": <task id>`` when that is not the mail id.
``kwargs`` carry ``mail_id``, the sealed ``_progress`` and ``_requested_at``, so the promoted
run is the same mail, with the same deadline and the same booking, under the same task id. Its
kind's priority is set again when it is published (:mod:`workers.promoter`).

One schedule per process and queue, where the ledger lives. A memory schedule can only be
promoted by a promoter in the same process (:mod:`workers.promoter`): without one, nothing is
parked.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from mailer.errors import BackendUnavailable
from mailer.schedule import MemorySchedule, Schedule, schedule_from_url
from mailer.schedule.park import parked_until
from mailer.settings import Settings
from mailer.steps import Later

log = logging.getLogger("mailguard")

PAYLOAD_VERSION = 1

_lock = threading.Lock()
_stores: dict[tuple[int, str, str], Schedule] = {}
#: The pid whose promoter runs (a memory schedule is parked into only in that process).
promoter_pid: list[int] = []


def schedule_for(settings: Settings) -> Schedule:
    """This process's schedule on the ledger's URL (built once per process and URL)."""
    url = settings.effective_ledger_url
    key = (os.getpid(), url, settings.queue)
    with _lock:
        if key not in _stores:
            _stores[key] = schedule_from_url(url, queue=settings.queue)
        return _stores[key]


@dataclass(frozen=True)
class Parked:
    """A payload, decoded: what a promoter publishes again."""

    task_id: str
    args: list[Any]
    kwargs: dict[str, Any]
    due: float

    def encode(self) -> bytes:
        """Compact JSON; the task id is left out when it is the mail id (the usual case)."""
        data: dict[str, Any] = {"v": PAYLOAD_VERSION, "args": self.args}
        if self.task_id != self.kwargs.get("mail_id"):
            data["task"] = self.task_id
        data |= {"kwargs": self.kwargs, "due": round(self.due, 3)}
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, payload: bytes | None) -> Parked:
        """The payload's message; ``ValueError`` saying why for anything else."""
        if payload is None:
            raise ValueError("no payload")
        try:
            data = json.loads(payload)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("v") != PAYLOAD_VERSION:
            raise ValueError("not a version 1 payload")
        args, kwargs, due = (data.get(k) for k in ("args", "kwargs", "due"))
        if not isinstance(kwargs, dict) or not isinstance(kwargs.get("mail_id"), str):
            raise ValueError("kwargs or mail id missing")
        task = data.get("task", kwargs["mail_id"])
        if not isinstance(task, str) or not isinstance(args, list):
            raise ValueError("task id or args missing")
        if isinstance(due, bool) or not isinstance(due, (int, float)):
            raise ValueError("due missing")
        return cls(task, args, kwargs, float(due))


def park(
    settings: Settings, later: Later, *, task_id: str, args: Any, kwargs: dict[str, Any]
) -> float | None:
    """Park this deferred run if its wait is longer than ``park_after``: its due time, or None
    when it keeps a countdown (short wait, parking off, no promoter for a memory schedule, or
    the schedule's Redis is down: the caller then holds a countdown, as without parking)."""
    due = parked_until(later, time.time(), settings.park_after)
    if due is None:
        return None
    store = schedule_for(settings)
    if isinstance(store, MemorySchedule) and promoter_pid != [os.getpid()]:
        return None
    mail_id = str(kwargs["mail_id"])
    entry = Parked(task_id, list(args or ()), kwargs, due)
    try:
        store.park(mail_id, due, entry.encode())
    except BackendUnavailable as exc:
        log.warning("mail %s: could not park it, holding a countdown: %s", mail_id, exc)
        return None
    log.info("mail %s parked until %.3f", mail_id, due, extra={"mail_id": mail_id})
    return due
