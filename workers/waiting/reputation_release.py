"""Releasing a resumed sender's paused mail at once (``mailguard reputation resume``).

A bulk mail of a paused sender waits ``REPUTATION_RECHECK`` (5 min) before it looks again
(:mod:`mailer.guard.gates.reputation`): that wait is longer than ``MAILGUARD_PARK_AFTER``, so
it waits parked in the queue's schedule (:mod:`workers.waiting.parking`). When the pause is lifted
by hand, :func:`release_paused` makes those entries due now (in the schedule and in the payload,
whose due time a promoter publishes as the message's ``eta``): a promoter publishes them
within its poll (a few seconds) and each run is judged again as any run is.

An entry is the pause's when its mail is of a bulk kind, from that sender, and holds no slot
ahead (``progress.due`` passed or none: a booked mail waits for its slot, and a countdown a
worker holds is watched for its slot, so neither is touched; nor is an entry with no progress,
whose slot, if any, is sealed in its kwargs). Entries being promoted, or due
within :data:`SOON` seconds, are left as they are (a promoter may be taking them).
"""

from __future__ import annotations

import time
from dataclasses import replace

from mailer.records.reputation import sender_of
from mailer.records.schedule import Schedule
from mailer.settings import Settings
from workers.waiting.payload import Parked

#: Entries due within this many seconds are left to the promoter (it may be taking them).
SOON = 5.0


def release_paused(settings: Settings, schedule: Schedule, sender: str) -> int:
    """Make the parked bulk mails of ``sender`` that wait on its pause due now; how many.
    Raises ``BackendUnavailable`` when the schedule's Redis is down."""
    bulk = {name for name, kind in settings.kinds.items() if kind.unsubscribe}
    if not bulk:
        return 0
    who = sender_of(sender)
    now = time.time()
    released = 0
    for mail_id, due, payload in schedule.scan():
        if due is None or due <= now + SOON:
            continue
        try:
            parked = Parked.decode(payload, mail_id)
        except ValueError:
            continue  # the promoter buries it when due
        if _waits_on_pause(parked, bulk, who, settings.sender, now):
            schedule.park(mail_id, now, replace(parked, due=now).encode())
            released += 1
    return released


def _waits_on_pause(parked: Parked, bulk: set[str], sender: str, default: str, now: float) -> bool:
    kwargs = parked.kwargs
    if kwargs.get("kind", "default") not in bulk:
        return False
    if sender_of(str(kwargs.get("from_email") or default)) != sender:
        return False
    # An entry with no progress (a message kept as enqueued) has no slot to read: left alone.
    return parked.progress is not None and parked.progress.due <= now
