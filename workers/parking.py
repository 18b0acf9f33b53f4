"""Parking a deferred mail: its task message goes to the schedule (:mod:`mailer.records.schedule`).

The payload is the message a promoter publishes again (:mod:`workers.payload`: a compact JSON
array of the due time, args, kwargs and the progress, about 150 B for a short mail): the
promoted run is the same mail, with the same deadline and the same booking, under the same task
id. Its kind's priority is set again when it is published (:mod:`workers.promoter`).

One schedule per process and queue, where the ledger lives. A memory schedule can only be
promoted by a promoter in the same process (:mod:`workers.promoter`): without one, nothing is
parked.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from mailer.errors import BackendUnavailable
from mailer.records.schedule import MemorySchedule, Schedule, schedule_from_url
from mailer.records.schedule.park import parked_until
from mailer.settings import Settings
from mailer.steps import Later
from workers.payload import Parked

log = logging.getLogger("mailguard")

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


def park(
    settings: Settings,
    later: Later,
    *,
    task_id: str,
    args: Any,
    kwargs: dict[str, Any],
    always: bool = False,
) -> float | None:
    """Park this deferred run if its wait is longer than ``park_after`` (any wait with
    ``always``): its due time, or None when it keeps a countdown (short wait, parking off, no
    promoter for a memory schedule, or the schedule's Redis is down: the caller then holds a
    countdown, as without parking)."""
    due = parked_until(later, time.time(), settings.park_after, always=always)
    if due is None:
        return None
    store = schedule_for(settings)
    if isinstance(store, MemorySchedule) and promoter_pid != [os.getpid()]:
        return None
    mail_id = str(kwargs["mail_id"])
    entry = Parked(task_id, list(args or ()), kwargs, due, progress=later.progress)
    try:
        store.park(mail_id, due, entry.encode())
    except BackendUnavailable as exc:
        log.warning("mail %s: could not park it, holding a countdown: %s", mail_id, exc)
        return None
    log.info("mail %s parked until %.3f", mail_id, due, extra={"mail_id": mail_id})
    return due
