"""The promoter: a thread in every worker's main process that publishes parked mails when due.

One worker of a queue at a time: the holder of the queue's fleet lease
(:mod:`workers.polling.lease`,
``MAILGUARD_FLEET_LEASE``; taken over within that many seconds when its holder dies); every
other worker's thread only tries to take the lease (one command each
:data:`workers.polling.lease.RETRY` seconds). The holder reads when the next entry falls due
(:meth:`~mailer.records.schedule.Schedule.next_due`, one pipelined round trip: every shard's
first watch, and a shard's first parked entry only every :data:`DUE_STALE` seconds, since a
mail parked by another process is due at least ``MAILGUARD_PARK_AFTER`` later) and sleeps
until then less the take-ahead, at most :data:`WAIT` seconds (the take-ahead less a margin:
a mail parked elsewhere is still taken ahead of its due), blocked on the schedule's wake list
(:meth:`~mailer.records.schedule.RedisSchedule.wait_wake`), which a new first watch pushes
to: so a countdown's watch is looked at when it falls due, not a poll later. While something
is due within the take-ahead and not yet takeable it looks every :data:`POLL` seconds. When
something is due within a second,
one script call per shard with something due
(:meth:`~mailer.records.schedule.Schedule.take_due`) atomically moves up to :data:`BATCH` entries
to *promoting* under a lease (``MAILGUARD_PROMOTE_LEASE``). It publishes each under its own task
id with the remaining countdown (under a second; none when overdue), all through one producer
in one batch (one pipeline on the Redis broker), then forgets them (``done``). Killed in
between, its lease ends and another worker publishes again; the ledger's claim and sent
marker keep the copy from sending. An entry that cannot be decoded is buried (a dead letter)
and logged, once. Entries the broker refuses go back to where they were, due again in
:data:`RETRY` seconds.

The same take is the **watchdog**: a booked mail held as a countdown has its payload watched in
the schedule (:func:`workers.waiting.parking.watch`) until a run of it starts or finishes; one whose
countdown ended more than ``MAILGUARD_WATCH_GRACE`` ago with no run seen (its worker died, the
broker lost or refused the message) is taken and published again like a parked mail, logged
once (mail id, how late) and counted (``mailguard_watchdog_republished_total``). Leased like
promotion, so one worker publishes it; the ledger keeps a second copy from sending.

The same thread watches the outbox (:mod:`workers.polling.outbox_watch`): a mail's first message
popped from the broker and never received (kombu's window between ``BRPOP`` and its unacked
record) is published again once ``MAILGUARD_OUTBOX_GRACE`` has passed
(``mailguard_outbox_republished_total``).

Started by a worker bootstep (:class:`PromoterStep`, added by :func:`workers.app.create_app`),
so ``celery worker``, ``mailguard worker`` and the in-process worker all run it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from celery import bootsteps

from mailer.crashpoints import crash_point
from mailer.durations import human
from mailer.errors import BackendUnavailable
from mailer.metrics import default_metrics
from mailer.records.schedule import TAKE_AHEAD, Schedule, Taken
from mailer.settings import Settings
from workers.brokers import priority, quorum, routing
from workers.brokers.confirmed import ConfirmedPublisher, confirms_needed
from workers.outbox import entries as outbox
from workers.polling.lease import Lease
from workers.polling.outbox_watch import OutboxWatch
from workers.process import settings as process_settings
from workers.run import state
from workers.waiting import parking
from workers.waiting.payload import Parked

log = logging.getLogger("mailguard")

#: Seconds between two looks while something is due within the take-ahead but not yet taken.
POLL = 0.3
#: The longest sleep between two looks at the schedule while nothing is due sooner (seconds).
WAIT = 0.7
#: Entries taken and published at most per take (all shards together).
BATCH = 500
#: Seconds a poll may rely on an earlier read of a shard's parked entries (see
#: :meth:`mailer.records.schedule.RedisSchedule.next_due`): kept under ``MAILGUARD_PARK_AFTER``
#: less the take-ahead and two polls, so a mail parked elsewhere is still taken ahead of its due.
DUE_STALE = 5.0
#: Seconds before entries the broker refused are taken again (not at their lease's end).
RETRY = 1.0
#: Test hook: a worker with this variable set kills itself (SIGKILL) after publishing a batch
#: and before forgetting it, as a crash there would; the value is the seconds it waits first
#: (its consumer may have taken the message meanwhile: kombu keeps it as unacknowledged).
KILL_AFTER_PUBLISH = "_MAILGUARD_TEST_KILL_AFTER_PUBLISH"


class Promoter:
    """Publishes due entries of ``schedule`` as the task named ``task_name`` (``send_mail``)
    through ``app``; the task need not be imported in this process."""

    def __init__(
        self,
        app: Any,
        schedule: Schedule,
        settings: Settings,
        *,
        task_name: str = state.SEND_MAIL,
    ) -> None:
        self.app = app
        self.task_name = task_name
        self.schedule = schedule
        self.lease = settings.promote_lease
        self.kinds = settings.kinds
        self._secret = settings.secret
        # Read once: a configuration lookup costs ~20 µs, the route is the same for every mail.
        self._broker_url = str(app.conf.broker_url)
        self._amqp = app.amqp
        queue = routing.queue_option(app, task_name, settings.queue)  # where send_mail goes
        route = app.amqp.router.route(queue, task_name, (), {}, app.tasks.get(task_name))
        self._route = dict(route)
        self._lanes = app.conf.get(routing.LOGICAL)  # the lanes' common name, on quorum lanes
        self._reply_to = ""  # this thread's (app.thread_oid), set by each batch
        self._sent_event = bool(app.conf.task_send_sent_event)
        park_after = settings.park_after if settings.park_after is not None else DUE_STALE
        self._stale = max(0.0, min(DUE_STALE, park_after - TAKE_AHEAD - 2 * WAIT))
        self._upcoming: float | None = None  # epoch seconds: the next due, as last read
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mailguard-promoter", daemon=True)
        self._down_since = 0.0
        #: On an AMQP broker, the batches' publisher confirms (:mod:`workers.brokers.confirmed`).
        self._confirmed = ConfirmedPublisher(app) if confirms_needed(self._broker_url) else None
        #: The watchdog's outbox part (:mod:`workers.polling.outbox_watch`), set by
        #: :class:`PromoterStep`.
        self.outbox_watch: OutboxWatch | None = None
        #: The queue's fleet lease (:mod:`workers.polling.lease`): only its holder polls; None:
        #: always.
        self.fleet_lease: Lease | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self.outbox_watch is not None:
            self.outbox_watch.close()
        if self.fleet_lease is not None:
            with contextlib.suppress(BackendUnavailable):  # else it ends at its ttl
                self.fleet_lease.release()
        if self._confirmed is not None:
            self._confirmed.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.fleet_lease is not None and not self.fleet_lease.held():
                    self._stop.wait(self.fleet_lease.retry)
                    continue
                taken = self.promote_once()
                if self.outbox_watch is not None:
                    self.outbox_watch.check()
            except BackendUnavailable as exc:
                if not self._down_since:
                    log.warning("mailguard promoter: the schedule is unavailable: %s", exc)
                self._down_since = self._down_since or time.monotonic()
                taken = 0
            except Exception:
                # A broker that cannot take the messages: what was taken stays promoting and
                # is taken again when its lease ends (the ledger keeps copies from sending).
                log.exception("mailguard promoter: could not publish; polling again")
                taken = 0
            else:
                if self._down_since:
                    log.warning("mailguard promoter: the schedule is available again")
                self._down_since = 0.0
            if taken < BATCH:  # a full batch: more may be due, take again at once
                self._sleep(self.wait_for(time.time()) if taken == 0 else POLL)

    def wait_for(self, now: float) -> float:
        """Seconds to sleep after a round that took nothing, at epoch ``now``: until the next
        due less the take-ahead, at most :data:`WAIT`; :data:`POLL` once that is passed (a
        watch is taken only when it is due, not ahead)."""
        upcoming = self._upcoming
        if upcoming is None:
            return WAIT
        ahead = upcoming - TAKE_AHEAD - now
        return min(ahead, WAIT) if ahead > 0 else POLL

    def _sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, woken early by a new first watch where the schedule can tell."""
        wait_wake = getattr(self.schedule, "wait_wake", None)
        if wait_wake is None or self._down_since:
            self._stop.wait(seconds)
            return
        try:
            wait_wake(seconds)
        except Exception as exc:  # Redis down or refusing: sleep here; the next look reports it
            log.debug("mailguard promoter: no wake list: %s", exc)
            self._stop.wait(seconds)

    def promote_once(self) -> int:
        """Take what is due, publish it, forget it; the number of entries taken.

        Asks first when the next entry is due (one cheap read); only then takes. The check reads
        this machine's clock, the take Redis's: a clock behind Redis's delays promotion by the
        difference, one ahead costs an empty take.
        """
        upcoming = self._upcoming = self.schedule.next_due(self._stale)
        if upcoming is None or upcoming > time.time() + TAKE_AHEAD:
            return 0
        taken = self.schedule.take_due(limit=BATCH, lease=self.lease)
        if not taken:
            return 0
        crash_point("promoting")
        try:
            published = self._publish_all(taken)
        except Exception:
            # Back where they were, due again shortly: the broker may be back in a second.
            with contextlib.suppress(BackendUnavailable):
                self.schedule.release(taken, RETRY)
            raise
        crash_point("republished")
        if hook := os.environ.get(KILL_AFTER_PUBLISH):
            time.sleep(float(hook))
            os.kill(os.getpid(), signal.SIGKILL)
        self.schedule.done([entry.mail_id for entry, _ in published])
        self._report(published)
        return len(taken)

    def _report(self, published: list[tuple[Taken, float]]) -> None:
        """One log line and one count for each mail the watchdog published again."""
        now = time.time()
        for entry, due in published:
            if entry.watched:
                default_metrics().watchdog_republished()
                log.warning(
                    "mailguard watchdog: mail %s published again, %s after its countdown "
                    "ended with no run seen",
                    entry.mail_id,
                    human(now - due),
                    extra={"mail_id": entry.mail_id},
                )

    def _publish_all(self, taken: list[Taken]) -> list[tuple[Taken, float]]:
        """Publish every usable entry of ``taken`` (bury the others); each entry published and
        its due time (epoch seconds).

        One producer and, where kombu offers it (5.7+, the Redis transport), one publish batch:
        the messages go out as one pipeline of ``LPUSH`` when the batch ends, not one round
        trip each. If the broker refuses them, nothing is forgotten: the entries go back to the
        schedule, due in :data:`RETRY` seconds (the ledger keeps copies from sending).
        """
        published: list[tuple[Taken, float]] = []
        with self.producing() as producer:
            for entry in taken:
                due = self._publish(entry.mail_id, entry.payload, producer)
                if due is not None:
                    published.append((entry, due))
        return published

    @contextlib.contextmanager
    def producing(self) -> Iterator[Any]:
        """One producer for a batch of :meth:`send` calls, in one publish batch where kombu
        offers it (the messages leave when the block ends). On an AMQP broker, the block ends
        once the broker acknowledged every message of it (:mod:`workers.brokers.confirmed`)."""
        self._reply_to = self.app.thread_oid
        if self._confirmed is not None:
            with self._confirmed.batch() as producer:
                yield producer
            return
        with self.app.producer_or_acquire() as producer:
            batch = getattr(producer, "batch", None)
            with batch(max_size=2 * BATCH) if batch is not None else contextlib.nullcontext():
                yield producer

    def _publish(self, mail_id: str, payload: bytes | None, producer: Any) -> float | None:
        """Publish one entry; an unusable one is buried. Its due time when published.

        The message is the one ``Task.apply_async`` would make (Celery's own
        ``create_task_message`` and ``send_task_message``), without what a caller needs and the
        promoter does not: the enqueue check (the call was checked when first enqueued, and is
        checked again on receipt, ``workers/run/request.py``), a result object and its subscription,
        the routing lookup (one queue: this worker's), the queue declaration (it exists: this
        worker consumes it) and publish retries (see :meth:`_publish_all`). About 0.1 ms a mail.
        """
        try:
            entry = Parked.decode(payload, mail_id)
            message = self.message(entry, entry.message_kwargs(mail_id, self._secret))
        except ValueError as exc:  # undecodable
            log.error(
                "mailguard promoter: parked mail %s is unusable (%s); moved to the dead letters",
                mail_id,
                exc,
                extra={"mail_id": mail_id},
            )
            self.schedule.bury(mail_id)
            return None
        kind = entry.kwargs.get("kind", "default")
        level = priority.publish_priority(self._broker_url, self.kinds, kind, booked=True)
        self.send(producer, message, level)
        return entry.due

    def message(self, entry: Parked, kwargs: dict[str, Any]) -> Any:
        """The task message of ``entry`` with ``kwargs``: with its ``eta`` when its due time
        (the limiter's clock) is ahead. ``ValueError`` for one Celery cannot make."""
        wait = entry.due - state.limiter_now()  # ``due`` is on the limiter's clock
        return self._amqp.create_task_message(
            entry.task_id,
            self.task_name,
            entry.args,
            kwargs,
            None,
            eta=datetime.fromtimestamp(entry.due, timezone.utc) if wait > 0.001 else None,
            reply_to=self._reply_to,
            create_sent_event=self._sent_event,
            argsrepr="(<redacted>)",
            kwargsrepr="{<redacted>}",
        )

    def send(self, producer: Any, message: Any, level: int | None) -> None:
        """Publish ``message`` at broker priority ``level`` through ``producer``, to this
        worker's ``send_mail`` queue (no declaration, no retries: the caller's)."""
        route = self._route
        if self._lanes:  # quorum lanes (workers.brokers.quorum): the level's lane
            route = {**route, "queue": self._amqp.queues[quorum.lane_queue(self._lanes, level)]}
            route["routing_key"] = route["queue"].routing_key
        self._amqp.send_task_message(
            producer,
            self.task_name,
            message,
            **route,
            priority=level,
            declare=[],
            retry=False,
        )


class PromoterStep(bootsteps.StartStopStep):
    """Runs a :class:`Promoter` in the worker's main process while the worker runs."""

    label = "mailguard promoter"
    # After the pool has forked its processes: a process forked while this thread holds a lock
    # (a connection pool's, an import's) would inherit it locked. The consumer starts last.
    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.promoter: Promoter | None = None

    def start(self, worker: Any) -> None:
        """Start the promoter; with parking off too: it is the watchdog of countdowns."""
        settings = process_settings.current()
        try:
            schedule = parking.schedule_for(settings)
        except ValueError as exc:
            log.warning("mailguard promoter not started: %s", exc)
            return
        self.promoter = Promoter(worker.app, schedule, settings)
        if schedule.client is not None:  # every worker sees it: one promoter at a time
            name = f"promoter:{settings.queue}"
            lease = Lease(schedule.client, schedule.url, name, ttl=settings.fleet_lease)
            self.promoter.fleet_lease = lease
        parking.promoter_runs_here()
        box = outbox.outbox_for(settings)
        if box is not None and settings.outbox_grace is not None:
            queue = routing.mail_queue(worker.app, settings.queue)
            self.promoter.outbox_watch = OutboxWatch(
                self.promoter, box, settings.outbox_grace, queue
            )
        self.promoter.start()

    def stop(self, worker: Any) -> None:
        if self.promoter is not None:
            self.promoter.stop()
            self.promoter = None
            parking.promoter_runs_here(False)

    def terminate(self, parent: Any) -> None:
        self.stop(parent)
