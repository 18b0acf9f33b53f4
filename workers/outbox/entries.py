"""The outbox on the workers' side: a mail's first message is recorded at ``send_mail.delay``
and cleared when a worker receives it (:mod:`mailer.records.outbox`: the story; the watchdog
that publishes a lost one again: :mod:`workers.polling.outbox_watch`).

- :func:`record`, at enqueue (:meth:`workers.tasks.GuardedTask.apply_async`): one script call
  on the outbox's Redis (:func:`mailer.factory.outbox_url`), riding in the publish
  (:mod:`workers.outbox.ride`) or written before it on a connection of its own, its answer
  read later (:mod:`mailer.records.outbox.writer`): the caller pays a system call, not a round
  trip. The write reaches Redis long before a worker can have popped the message and cleared
  it; were a clear ever first, the entry would stay and its copy end as a repeat. If that
  Redis is down (found at this write or the next) the mail is published all
  the same (the broker holds it; only kombu's pop window is then open for it), logged once,
  and the outbox is not asked again for :data:`DOWN_PAUSE` seconds, so a frozen Redis costs
  callers one timeout, not one each. A publish that fails discards the entry (:func:`discard`;
  its Redis down then: at the next enqueue).
- :func:`received`, in a worker's main process when a message arrives
  (:class:`workers.run.request.GuardedRequest`): kombu has recorded it as unacknowledged before
  the consumer sees it, so from then on the broker's own redelivery covers it. One script
  call, for a first message only (no ``_progress``, not redelivered), written without waiting
  for its answer (the main process never waits on the outbox). A clear that Redis could not
  take (down, or restarting) is kept in the process and made again before the watchdog's next
  look (:func:`retry_receipts`), so a mail received is never taken for lost.

One outbox per process, URL and queue, beside the queue's one schedule and on its Redis
client (see :func:`workers.waiting.parking.schedule_for`: whatever app or broker URL a producer
uses); a memory one only where this process's promoter runs.
Not for messages published with ``send_task`` or by other producers: they are not recorded.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mailer.errors import BackendUnavailable
from mailer.factory import build_outbox, outbox_url
from mailer.records.outbox import Outbox, lane_of
from mailer.settings import Settings
from workers.outbox import ride as outbox_ride
from workers.process.per_process import PerProcess
from workers.waiting import parking
from workers.waiting.payload import Parked

log = logging.getLogger("mailguard")

#: Seconds the outbox is left alone after its Redis was found down (enqueue and receipt each).
DOWN_PAUSE = 5.0

#: This process's outboxes by (URL, queue).
_stores: PerProcess[tuple[str, str], Outbox] = PerProcess()
_down_until = {"record": 0.0, "received": 0.0, "discard": 0.0}  # monotonic
#: Receipts kept at most while the outbox's Redis is down (:func:`retry_receipts`).
RECEIPTS_KEPT = 10_000
_receipts: deque[tuple[Outbox, str, str]] = deque()
#: Entries of failed publishes not yet removed (their Redis was down: :func:`discard`).
_discards: deque[Recorded] = deque(maxlen=RECEIPTS_KEPT)


@dataclass(frozen=True)
class Recorded:
    """An entry written at enqueue (or riding in the publish: ``ride``): where, to discard it
    if the publish fails."""

    outbox: Outbox
    mail_id: str
    lane: str
    payload: bytes
    ride: outbox_ride.Ride | None = None


def outbox_for(settings: Settings) -> Outbox | None:
    """This process's outbox, at :func:`mailer.factory.outbox_url` (on the queue's schedule's
    client when that is the ledger's database); None when ``MAILGUARD_OUTBOX_GRACE`` is off or
    no promoter can see a memory one."""
    if settings.outbox_grace is None:
        return None
    url = outbox_url(settings)
    key = (url, settings.queue)
    known = _stores.get(key)
    if known is not None and known.client is not None:
        return known
    schedule = parking.schedule_for(settings)
    if schedule.client is None and not parking.promoter_here():
        return None
    client = schedule.client if url == settings.effective_ledger_url else None
    return _stores.built(key, lambda: build_outbox(settings, client=client))


def close_writers() -> None:
    """Close the connections of this process's outboxes' writes nobody waits for (their unread
    answers dropped; the next write opens another). For a process whose Redis was flushed or
    replaced under it (the test suite between tests): a write sent to the old one is not
    answered, nor run again, in the new one; the receipts kept to make later, and the entries
    of failed publishes kept to remove later, are forgotten. The outboxes stay (their clients
    stay open)."""
    _receipts.clear()
    _discards.clear()
    for box in _stores.values():
        box.close()


def record(
    settings: Settings,
    *,
    task_id: str,
    args: Any,
    kwargs: dict[str, Any],
    priority: Any,
    not_before: float | None,
    app: Any = None,
) -> Recorded | None:
    """Write the outbox entry of a ``send_mail`` call about to be published at ``priority``
    (``not_before``: a caller's short ``eta``, epoch seconds) through ``app``: or hand it to
    the publish, when it can ride in it (:mod:`workers.outbox.ride`; then call
    :func:`published` after the publish). None when not recorded."""
    if time.monotonic() < _down_until["record"]:
        return None
    if _discards and time.monotonic() >= _down_until["discard"]:
        _discard_left()
    outbox = outbox_for(settings)
    if outbox is None:
        return None
    mail_id = kwargs.get("mail_id") or task_id
    due = not_before or float(kwargs.get("_requested_at") or 0.0)
    try:
        payload = Parked(task_id, list(args or ()), kwargs | {"mail_id": mail_id}, due).encode()
    except (TypeError, ValueError) as exc:  # kombu's JSON carries it, json does not: rare
        log.warning("mail %s: not kept in the outbox (%s)", mail_id, exc)
        return None
    lane = lane_of(priority)
    command = None
    if app is not None and _rides(app, settings):
        command = outbox.put_command(str(mail_id), lane, payload)
    if command is not None:
        ride = outbox_ride.ride_for(command, outbox.server)
        return Recorded(outbox, str(mail_id), lane, payload, ride)
    recorded = Recorded(outbox, str(mail_id), lane, payload)
    return recorded if _put_later(recorded) else None


def published(recorded: Recorded | None) -> None:
    """After the publish of a recorded mail: an entry that was to ride in it and did not (kombu
    published otherwise) is written now; one the server refused for want of its script is
    written with the script loaded."""
    ride = recorded.ride if recorded is not None else None
    if recorded is None or ride is None:
        return
    if not ride.sent:
        _put_later(recorded)
    elif ride.lost is not None:
        try:
            recorded.outbox.put(recorded.mail_id, recorded.lane, recorded.payload)
        except BackendUnavailable as exc:
            _pause("record", f"mailguard outbox: unavailable at enqueue: {exc}")
        except Exception as exc:  # the mail is published: it goes on without an entry
            log.warning("mail %s: not kept in the outbox (%s)", recorded.mail_id, exc)


def _rides(app: Any, settings: Settings) -> bool:
    """Whether ``app``'s publishes to send_mail's queue can carry the outbox's put (asked of
    the app's configuration once per ledger URL: a lookup there costs ~10 µs)."""
    known: dict[str, bool] = app.__dict__.setdefault("_mailguard_rides", {})
    url = settings.effective_ledger_url
    if url not in known:
        transport = app.conf.broker_transport
        known[url] = isinstance(transport, str) and outbox_ride.possible(
            str(app.conf.broker_url), transport, url
        )
    return known[url]


def _put_later(recorded: Recorded) -> bool:
    """Write ``recorded``'s entry without waiting for the answer; False when its Redis is down
    (logged once an outage)."""
    try:
        recorded.outbox.put_later(recorded.mail_id, recorded.lane, recorded.payload)
    except BackendUnavailable as exc:
        _pause("record", f"mailguard outbox: unavailable at enqueue, publishing without it: {exc}")
        return False
    return True


def discard(recorded: Recorded | None) -> None:
    """The publish of a recorded mail failed: remove its entry, once the write is applied
    (logged if either fails: the caller saw the failure, yet the watchdog may publish the mail
    once its grace is over)."""
    if recorded is None:
        return
    try:
        recorded.outbox.settle()
        recorded.outbox.discard(recorded.mail_id, recorded.lane)
    except BackendUnavailable as exc:
        _discards.append(recorded)
        log.warning(
            "mail %s: publish failed; its outbox entry, if written, is removed at the next "
            "send_mail.delay: %s",
            recorded.mail_id,
            exc,
        )


def _discard_left() -> None:
    """Remove the entries of failed publishes whose Redis was down then (at the next enqueue:
    one round trip each, only after such a failure); kept again while it is still down, and
    not tried again for :data:`DOWN_PAUSE` seconds (a caller waits on one failed try at most
    once a pause, however long the outage)."""
    while _discards:
        recorded = _discards.popleft()
        try:
            recorded.outbox.discard(recorded.mail_id, recorded.lane)
        except BackendUnavailable as exc:
            _discards.appendleft(recorded)
            _pause("discard", f"mailguard outbox: unavailable for a failed publish's entry: {exc}")
            return


def received(
    settings: Settings, task_id: str, kwargs: Any, delivery_info: Mapping[str, Any]
) -> None:
    """A worker's main process received a message: clear its outbox entry (first messages
    only: a redelivered copy or a deferred run's has none). A clear its Redis could not take
    (down now, or within the last :data:`DOWN_PAUSE` seconds) is kept, and made again by
    :func:`retry_receipts`."""
    if settings.outbox_grace is None or delivery_info.get("redelivered"):
        return
    if not isinstance(kwargs, dict) or "_progress" in kwargs:
        return
    mail_id = kwargs.get("mail_id") or task_id
    if not isinstance(mail_id, str):
        return
    outbox = outbox_for(settings)
    if outbox is None:
        return
    lane = lane_of(delivery_info.get("priority"))
    if time.monotonic() < _down_until["received"]:
        _keep(outbox, mail_id, lane)
        return
    try:
        outbox.received_later(mail_id, lane)
    except BackendUnavailable as exc:
        _keep(outbox, mail_id, lane)
        _pause("received", f"mailguard outbox: unavailable at receipt, clearing later: {exc}")
        for unsure in outbox.unconfirmed_receipts():  # sent before the failure, maybe not applied
            _keep(outbox, *unsure)


def _keep(outbox: Outbox, mail_id: str, lane: str) -> None:
    """Keep a receipt to clear later (the oldest dropped, logged, past :data:`RECEIPTS_KEPT`)."""
    if len(_receipts) >= RECEIPTS_KEPT:
        _box, dropped, _lane = _receipts.popleft()
        log.warning("mail %s: receipt not cleared in the outbox (too many waiting)", dropped)
    _receipts.append((outbox, mail_id, lane))


def retry_receipts() -> int:
    """Clear the entries of the receipts kept while their Redis was down, oldest first (from
    the watchdog's thread, before each look: :class:`workers.polling.outbox_watch.OutboxWatch`); how
    many were cleared. Raises :class:`~mailer.errors.BackendUnavailable` when it is still down
    (the rest are kept)."""
    done = 0
    while _receipts:
        outbox, mail_id, lane = _receipts[0]
        outbox.received(mail_id, lane)
        with contextlib.suppress(IndexError):  # another thread took it: cleared twice, harmless
            _receipts.popleft()
        done += 1
    return done


def _pause(step: str, line: str) -> None:
    """Leave the outbox alone at ``step`` for :data:`DOWN_PAUSE` seconds; log ``line`` once
    per outage (the first failure after a success)."""
    now = time.monotonic()
    if _down_until[step] <= now - DOWN_PAUSE:  # not paused within the last pause: a new outage
        log.warning(line)
    _down_until[step] = now + DOWN_PAUSE
