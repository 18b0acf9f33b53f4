"""The outbox's protocol and its plain data (:mod:`mailer.records.outbox`: the story)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

#: How long an entry is kept at most, in seconds (a day): a mail still queued after that is
#: no longer covered. Below the ledger's outcome TTL (7 days), so a copy published again always
#: finds its mail's final outcome if it was sent.
OUTBOX_TTL = 86_400.0
#: Seconds by which a lane's mark must pass an entry's write time before the entry counts as
#: popped: covers a producer slower between its outbox write and its publish than this (such
#: an entry may be published again once, and the ledger keeps that copy from sending).
ORDER_SLACK = 1.0
#: Seconds a receipt that found no entry is remembered: a put of that mail arriving later (its
#: write overtaken by the publish and the receipt) writes nothing (:meth:`Outbox.received`).
CLEARED_TTL = 60.0
#: Entries :meth:`Outbox.overdue` lists at most per call.
OVERDUE_LIMIT = 200
#: Every lane: a broker priority 0-9 as text, and ``-`` for a message with none (or another).
LANES = (*(str(p) for p in range(10)), "-")


def lane_of(priority: object) -> str:
    """The lane of a message published at broker ``priority``: its :data:`LANES` entry."""
    if isinstance(priority, int) and not isinstance(priority, bool) and 0 <= priority <= 9:
        return str(priority)
    return "-"


@dataclass(frozen=True)
class Pending:
    """An entry older than the grace whose message was popped from its lane: ``lane`` (the
    broker priority it was published at, as text), ``at`` its write time (epoch seconds, the
    store's clock: Redis's ``TIME``)."""

    mail_id: str
    lane: str
    at: float


@dataclass(frozen=True)
class Overdue:
    """What :meth:`Outbox.overdue` found: the entries shown popped (``popped``) and how many
    other entries are older than the grace (``waiting``: still queued, or popped from a lane
    whose queue the caller has not checked)."""

    popped: list[Pending]
    waiting: int


class Outbox(Protocol):
    """Each mail's first message between ``send_mail.delay`` and a worker receiving it, with the
    payload to publish again. Every method is one atomic step; times on the store's clock.

    A *lane* is one broker priority of the queue: a FIFO list (kombu's Redis transport keeps
    one per priority, RabbitMQ delivers one priority in publish order). Each lane has a *mark*:
    the latest write time of an entry received from it. An entry older than the mark (less
    :data:`ORDER_SLACK`) was popped before that later one was received: if it is still here,
    its message was lost between the broker's pop and the worker's receipt.
    """

    @property
    def client(self) -> Any:
        """The Redis client every worker shares; None for an outbox in this process alone."""
        ...

    def put_command(self, mail_id: str, lane: str, payload: bytes) -> tuple[Any, ...] | None:
        """:meth:`put` as one command for the broker's publish to send ahead of its own (see
        :mod:`workers.outbox.ride`); None when this outbox cannot ride in a publish."""
        ...

    @property
    def server(self) -> dict[str, Any]:
        """The connection settings of :attr:`client` (empty without one)."""
        ...

    def close(self) -> None:
        """Close the connections of the writes nobody waits for (none in memory)."""
        ...

    def unconfirmed_receipts(self) -> list[tuple[str, str]]:
        """The receipts (mail id, lane) written without waiting whose answers were lost with
        their connection: make them again (none in memory)."""
        ...

    def is_empty(self) -> bool:
        """Whether no lane holds an entry (one ``EXISTS`` on Redis)."""
        ...

    def put(self, mail_id: str, lane: str, payload: bytes) -> None:
        """Record ``mail_id``'s message about to be published in ``lane``; replaces an entry of
        the same id. Expires on its own after :data:`OUTBOX_TTL` seconds. Writes nothing when
        a receipt of ``mail_id`` found no entry within the last :data:`CLEARED_TTL` seconds
        (the put came after its message was received)."""
        ...

    def put_later(self, mail_id: str, lane: str, payload: bytes) -> None:
        """:meth:`put`, written without waiting for the store's answer (the Redis outbox reads
        it later), for a caller with a round trip of its own to make next (the broker's
        publish). A failure may be raised by a later call instead (the store gone)."""
        ...

    def settle(self) -> None:
        """Wait until every :meth:`put_later` made so far was applied (raising what it
        would); before a write that must come after them."""
        ...

    def received(self, mail_id: str, lane: str) -> bool:
        """A worker received ``mail_id``'s message from ``lane``: remove the entry and move the
        lane's mark to its write time (never back). True when there was an entry; when there
        was none, the receipt is remembered for :data:`CLEARED_TTL` seconds, so that a put
        arriving after it writes nothing."""
        ...

    def received_later(self, mail_id: str, lane: str) -> None:
        """:meth:`received`, written without waiting for the answer (as :meth:`put_later`):
        for a worker's main process, which must not wait on the outbox between two messages."""
        ...

    def discard(self, mail_id: str, lane: str) -> bool:
        """Remove the entry without moving any mark (its publish failed). True if there was one."""
        ...

    def overdue(
        self,
        grace: float,
        *,
        drained: bool = False,
        limit: int = OVERDUE_LIMIT,
        slack: float = ORDER_SLACK,
    ) -> Overdue:
        """Entries written more than ``grace`` seconds ago: those behind their lane's mark by
        ``slack`` seconds (every one of them with ``drained``: the caller saw the whole queue
        empty), at most ``limit``, oldest first per lane (lanes in :data:`LANES` order); and the
        count of the others. Nothing changes, but entries past :data:`OUTBOX_TTL` go."""
        ...

    def take(self, pending: Sequence[Pending], grace: float) -> list[tuple[Pending, bytes]]:
        """Of ``pending``, the entries still there and still older than ``grace`` seconds: each
        is written again as of now (its copy is about to be published; the next copy only after
        another grace) and returned with its payload. Two callers never take one entry within a
        grace."""
        ...

    def size(self) -> int:
        """How many entries the outbox holds (every lane)."""
        ...
