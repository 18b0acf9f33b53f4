"""The watchdog's outbox part: a mail's first message popped from the broker and never received
is published again (:mod:`mailer.records.outbox`: the story; the enqueue and receipt sides:
:mod:`workers.outbox.entries`).

Run by the promoter's thread (:class:`workers.polling.promoter.Promoter`, in the one worker of the
queue holding the fleet lease) every :data:`POLL` seconds:

0. One ``EXISTS`` over every lane of a Redis outbox: with none (every first message received),
   nothing more: one command a look while idle.
1. One script call lists the entries older than ``MAILGUARD_OUTBOX_GRACE`` that are behind
   their lane's mark (a later message of their lane was received, so they were popped) and
   counts the other old ones.
2. Only if some old ones are not shown popped: the broker's queue length (a passive declare,
   one round trip). An empty queue shows every old entry popped. A backlog (a newsletter of
   100 000 mails queued for an hour) is neither behind a mark nor in an empty queue: nothing
   of it is published again.
3. An entry shown popped in two looks at least :data:`SETTLE` seconds apart (its consumer may
   be between kombu's pop and the receipt) whose mail has no final outcome in the ledger (one
   that has was received: its entry is dropped without a word) is taken (written again as of
   now: the next copy only after another grace, by whichever worker) and published at its
   lane's priority, under its own task id, with its caller's ``eta`` if that is still ahead:
   one log line each (mail id, how old; no address) and ``mailguard_outbox_republished_total``.

Before each look, this process's receipts that its Redis could not take are made
(:func:`workers.outbox.entries.retry_receipts`), and a put that arrived after its mail's receipt
wrote nothing (:data:`~mailer.records.outbox.CLEARED_TTL`): so a mail received is not taken for
lost. A copy of a mail that was not lost after all (a producer that published more than
:data:`~mailer.records.outbox.ORDER_SLACK` after writing the entry, a receipt kept by a worker
killed before it could make it) ends as a repeat: the ledger's claim and final outcome keep it
from sending twice. So a lost first message goes again about ``grace`` + 2 s after
``send_mail.delay`` when nothing else waits, or once the mails queued behind it are received.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import redis
from kombu.exceptions import ChannelError

from mailer.durations import human
from mailer.metrics import default_metrics
from mailer.records.outbox import ORDER_SLACK, Outbox, Pending
from workers.brokers import routing
from workers.outbox.entries import retry_receipts
from workers.run import state
from workers.waiting.payload import Parked

log = logging.getLogger("mailguard")

#: Seconds between two looks at the outbox.
POLL = 1.0
#: Seconds an entry must have been shown popped before it is published again.
SETTLE = 1.0


class Publisher(Protocol):
    """What the watch publishes through: :class:`workers.polling.promoter.Promoter`."""

    app: Any

    def producing(self) -> Any: ...
    def message(self, entry: Parked, kwargs: dict[str, Any]) -> Any: ...
    def send(self, producer: Any, message: Any, level: int | None) -> None: ...


def finished_in_ledger(mail_id: str) -> bool:
    """Whether the ledger of this process's guard holds ``mail_id``'s final outcome (sent,
    dropped or failed): one read of the ledger."""
    return state.guard().ledger.recorded(mail_id) is not None


def lanes_empty(outbox: Outbox) -> bool:
    """Whether a Redis ``outbox`` holds no entry in any lane (one ``EXISTS``; the lanes share
    one hash slot); False for another outbox or when Redis cannot say (the full look then
    runs, and reports Redis down)."""
    if outbox.client is None:
        return False
    try:
        return outbox.is_empty()
    except redis.RedisError:
        return False


class OutboxWatch:
    """Publishes lost first messages of ``outbox`` again through ``publisher`` (its queue:
    ``queue``), ``grace`` seconds after their entry was written at the earliest, unless
    ``finished`` (the ledger) says the mail has its final outcome. ``poll``,
    ``settle`` and ``slack`` (seconds) are :data:`POLL`, :data:`SETTLE` and
    :data:`~mailer.records.outbox.ORDER_SLACK` but in tests."""

    def __init__(
        self,
        publisher: Publisher,
        outbox: Outbox,
        grace: float,
        queue: str,
        *,
        finished: Callable[[str], bool] | None = finished_in_ledger,
        poll: float = POLL,
        settle: float = SETTLE,
        slack: float = ORDER_SLACK,
    ) -> None:
        self.publisher = publisher
        self.finished = finished
        self.outbox = outbox
        self.grace = grace
        self.queue = queue
        self.poll, self.settle, self.slack = poll, settle, slack
        self._next = 0.0  # monotonic: the next look
        self._seen: dict[str, float] = {}  # mail id -> monotonic time first shown popped
        self._connection: Any = None

    def check(self) -> int:
        """Look if due (every :data:`POLL` s): publish what was lost; how many were published.
        Raises :class:`~mailer.errors.BackendUnavailable` when the outbox is down."""
        now = time.monotonic()
        if now < self._next:
            return 0
        self._next = now + self.poll
        retry_receipts()  # this process's receipts kept while Redis was down: first
        if lanes_empty(self.outbox):
            self._seen = {}
            return 0
        found = self.outbox.overdue(self.grace, slack=self.slack)
        popped = found.popped
        if found.waiting and self.queue_size() == 0:
            popped = self.outbox.overdue(self.grace, drained=True).popped
        self._seen = {p.mail_id: self._seen.get(p.mail_id, now) for p in popped}
        ready = self._unfinished([p for p in popped if now - self._seen[p.mail_id] >= self.settle])
        if not ready:
            return 0
        taken = self.outbox.take(ready, self.grace)
        for entry, _ in taken:
            self._seen.pop(entry.mail_id, None)
        return self._publish(taken, {p.mail_id: p.at for p in ready})

    def _unfinished(self, ready: list[Pending]) -> list[Pending]:
        """Of the entries ``ready``, those whose mail has no final outcome in the ledger; the
        others were received (a receipt whose clear was lost) and are dropped without an alarm.
        Nothing when the ledger cannot be asked (they are looked at again next time)."""
        finished = self.finished
        if not ready or finished is None:
            return ready
        left = []
        try:
            for entry in ready:
                if not finished(entry.mail_id):
                    left.append(entry)
                    continue
                log.info("mailguard watchdog: mail %s finished; its entry dropped", entry.mail_id)
                self.outbox.discard(entry.mail_id, entry.lane)
                self._seen.pop(entry.mail_id, None)
        except Exception as exc:  # the ledger's errors, whatever they are: not proven lost
            log.info("mailguard watchdog: the ledger cannot be asked: %s", exc)
            return []
        return left

    def _publish(self, taken: list[tuple[Pending, bytes]], written: dict[str, float]) -> int:
        """Publish each taken entry in one batch (discard one that cannot be decoded); log and
        count each one published."""
        published: list[Pending] = []
        with self.publisher.producing() as producer:
            for entry, payload in taken:
                try:
                    parked = Parked.decode(payload, entry.mail_id)
                    message = self.publisher.message(parked, _first_kwargs(parked))
                except ValueError as exc:
                    log.error(
                        "mailguard watchdog: outbox entry of %s unusable (%s); dropped",
                        entry.mail_id,
                        exc,
                        extra={"mail_id": entry.mail_id},
                    )
                    self.outbox.discard(entry.mail_id, entry.lane)
                    continue
                level = int(entry.lane) if entry.lane.isdigit() else None
                self.publisher.send(producer, message, level)
                published.append(entry)
        for entry in published:
            _count_republished()
            log.warning(
                "mailguard watchdog: mail %s published again, %s after send_mail.delay: its "
                "first message was popped from the broker and never received",
                entry.mail_id,
                human(entry.at - written.get(entry.mail_id, entry.at)),
                extra={"mail_id": entry.mail_id},
            )
        return len(published)

    def queue_size(self) -> int | None:
        """How many messages wait in the queue (every priority); 0 when the broker does not
        know it (nothing waits), None when the broker cannot be asked (nothing is concluded)."""
        try:
            if self._connection is None:
                self._connection = self.publisher.app.connection_for_read()
            channel = self._connection.default_channel
            names = routing.mail_queues(self.publisher.app, self.queue)  # quorum: each lane
            return sum(
                int(channel.queue_declare(queue=q, passive=True).message_count) for q in names
            )
        except ChannelError:  # not found: a Redis queue with no list left is empty
            self.close()
            return 0
        except Exception as exc:  # the broker's errors, whatever they are: ask next time
            log.info("mailguard watchdog: queue length unknown: %s", exc)
            self.close()
            return None

    def close(self) -> None:
        """Drop the broker connection (opened again at the next need)."""
        if self._connection is not None:
            with contextlib.suppress(Exception):  # closing a broken connection: nothing to keep
                self._connection.release()
            self._connection = None


#: ``mailguard_outbox_republished_total`` by registry (one per process's metrics).
_counters: dict[int, Any] = {}


def _count_republished() -> None:
    """Count one first message published again (``mailguard_outbox_republished_total``, on the
    registry of this process's metrics; nothing when metrics are off)."""
    registry = getattr(default_metrics(), "registry", None)
    if registry is None:
        return
    counter = _counters.get(id(registry))
    if counter is None:
        from prometheus_client import Counter  # noqa: PLC0415 # only where metrics are on

        counter = _counters[id(registry)] = Counter(
            "mailguard_outbox_republished",
            "First messages the watchdog published again: popped and never received.",
            registry=registry,
        )
    counter.inc()


def _first_kwargs(parked: Parked) -> dict[str, Any]:
    """The first message's keywords as the caller made them: the mail id only if it was its own."""
    kwargs = dict(parked.kwargs)
    if kwargs.get("mail_id") == parked.task_id:
        kwargs.pop("mail_id")
    return kwargs
