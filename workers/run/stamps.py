"""The stamps ``send_mail.delay`` puts on a caller's call, and what a run takes from them.

- ``_requested_at``: epoch seconds on the caller's clock, to the ms (the queue-wait metric; a
  kind's ``max_wait`` counts from it: :mod:`workers.run.call`);
- ``_order``: epoch microseconds of the call, strictly increasing within the producer's process
  (:func:`order_stamp`): the mail's place in its recipient's booked order
  (:mod:`mailer.limits.ordering`). It rides in the message's keywords, so every later run of the
  mail (a deferral, a parked or watched copy, a redelivery) carries the same one. Producers on
  hosts whose clocks disagree are ordered by their clocks.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

from mailer.steps import Progress

_order_lock = threading.Lock()
_last_order = [0]


def stamped(call: dict[str, Any], kwargs: Any) -> Any:
    """A caller's ``kwargs`` with the stamps the checked ``call`` lacks: ``_requested_at`` and,
    for a caller's call (no ``_progress``: not a run published again), ``_order``."""
    if "_requested_at" not in call:
        kwargs = {**(kwargs or {}), "_requested_at": round(time.time(), 3)}
    if "_order" not in call and "_progress" not in call:
        kwargs = {**(kwargs or {}), "_order": order_stamp()}
    return kwargs


def arrived(progress: Progress, requested_at: float | None, order: int | None) -> Progress:
    """A run's ``progress`` with the stamps its message carries: ``requested_at`` (never later
    than this worker's clock) when the progress has none, and ``order`` (never carried in the
    progress: it rides in the message)."""
    if not progress.requested_at and requested_at:
        progress = replace(progress, requested_at=min(float(requested_at), time.time()))
    return replace(progress, order=order) if order else progress


def order_stamp() -> int:
    """Epoch microseconds now, strictly increasing within this process (one more than the last
    stamp when the clock has not moved on, or went back)."""
    with _order_lock:
        stamp = max(time.time_ns() // 1000, _last_order[0] + 1)
        _last_order[0] = stamp
        return stamp
