"""When a deferred run is parked rather than held as a countdown: a pure rule, no I/O."""

from __future__ import annotations

from mailer import outcomes as why
from mailer.steps import Later


def parked_until(
    later: Later, now: float, park_after: float | None, *, always: bool = False
) -> float | None:
    """The due time (epoch seconds) to park ``later`` until, or None to keep a countdown.

    A booked mail waits for its slot (``outcome.due``, however far: no hops); any other
    deferral (backoff, in flight) for its ``wait``. Parked when that is more than
    ``park_after`` seconds from ``now``, or whatever the wait with ``always`` (its countdown
    could not be published); ``park_after`` None means parking is off.
    """
    if park_after is None:
        return None
    booked = later.outcome.reason == why.BOOKED and later.outcome.due
    due = float(later.outcome.due) if booked and later.outcome.due else now + later.wait
    return due if always or due - now > park_after else None
