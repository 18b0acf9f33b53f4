"""The schedule's protocol and its plain data (:mod:`mailer.records.schedule`: the story)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

#: How many due entries one :meth:`Schedule.take_due` moves at most.
TAKE_LIMIT = 500
#: How long a worker holds the entries it took, in seconds, before another may take them again.
PROMOTE_LEASE = 30.0
#: Entries due within this many seconds are taken now (they travel with a countdown under it).
TAKE_AHEAD = 1.0


@dataclass(frozen=True)
class Taken:
    """An entry taken for promotion: its mail id and payload (None if it vanished: cancelled);
    ``watched``: it was a watch whose run was not seen in time (the watchdog's)."""

    mail_id: str
    payload: bytes | None
    watched: bool = False


@dataclass(frozen=True)
class ScheduleStats:
    """How many entries wait (``parked``), are being promoted, or are dead letters; and the
    due time of the earliest parked entry (epoch seconds, None when nothing is parked);
    ``watched``: booked mails held as countdowns whose payload is kept for the watchdog."""

    parked: int
    promoting: int
    dead: int
    earliest_due: float | None
    watched: int = 0


class Schedule(Protocol):
    """Parked mails by due time, each with an opaque payload. Every method is one atomic step.

    A mail id is in at most one place: parked (by due time), watched (a countdown a worker
    holds, by the time its run should have been seen), promoting (taken under a lease) or dead
    (undecodable). Times are epoch seconds; the Redis schedule reads Redis's clock.
    """

    @property
    def client(self) -> Any:
        """The Redis client every worker shares; None for a schedule in this process alone
        (only a promoter of this process sees it)."""
        ...

    @property
    def url(self) -> str:
        """The URL it reports (``memory://`` for one in this process)."""
        ...

    def parked_payloads_key(self) -> str | None:
        """The one key that holds every parked payload (a one-shard Redis schedule), for a
        ledger that recognises parked mails in its own calls; None elsewhere."""
        ...

    def park(self, mail_id: str, due: float, payload: bytes) -> None:
        """Park ``mail_id`` until ``due`` with ``payload``; a parked or promoting entry of the
        same id is replaced (a promoted mail that parks again)."""
        ...

    def watch(self, mail_id: str, due: float, payload: bytes) -> None:
        """Keep ``payload`` for a booked mail a worker holds as a countdown: taken (by the
        watchdog) only once ``due`` has passed, never ahead. Replaces a parked, promoting or
        watched entry of the same id."""
        ...

    def running(self, mail_id: str, lease: float) -> bool:
        """A run of ``mail_id`` started: if it is watched, it is not taken before ``lease``
        seconds from now. True when it is watched; nothing changes otherwise."""
        ...

    def forget(self, mail_id: str) -> bool:
        """A run of ``mail_id`` finished: remove its entry wherever it waits (parked, watched,
        promoting). True when there was one."""
        ...

    def release(self, taken: Sequence[Taken], after: float) -> int:
        """Entries taken and not published (the broker refused): each back where it was
        (parked, or watched), due in ``after`` seconds rather than at its lease's end. Only
        entries still promoting. Returns how many were released."""
        ...

    def take_due(
        self, limit: int = TAKE_LIMIT, lease: float = PROMOTE_LEASE, ahead: float = TAKE_AHEAD
    ) -> list[Taken]:
        """Move up to ``limit`` entries to *promoting* under a lease of ``lease`` seconds and
        return them, earliest first: those whose lease expired (a worker died while promoting
        them), those due within ``ahead`` seconds, and watches whose time has passed."""
        ...

    def next_due(self, stale: float = 0.0) -> float | None:
        """When the schedule next has something to hand out (epoch seconds; None: empty): the
        earliest due time or promotion lease end. One cheap read: what a poller asks first.
        ``stale`` > 0: parked entries written by other processes may be seen up to ``stale``
        seconds late (a poller's cheaper read; watches are always read)."""
        ...

    def done(self, mail_ids: Sequence[str]) -> int:
        """Forget promoted entries (published): only those still promoting, so an entry parked
        again meanwhile stays. Returns how many were forgotten."""
        ...

    def bury(self, mail_id: str) -> None:
        """Move a promoting entry whose payload cannot be used to the dead letters."""
        ...

    def cancel(self, mail_id: str) -> bytes | None:
        """Remove ``mail_id`` wherever it waits (parked, watched or promoting); its payload, or
        None."""
        ...

    def payload(self, mail_id: str) -> bytes | None:
        """The payload of ``mail_id`` if it waits (parked, watched or promoting); nothing
        changes."""
        ...

    def stats(self) -> ScheduleStats:
        """Counts, and the earliest due time or ended lease (see :meth:`next_due`)."""
        ...

    def scan(self) -> Iterator[tuple[str, float | None, bytes]]:
        """Every parked, watched or promoting entry: mail id, due (a watch's: when the watchdog
        may take it; None while promoting), payload."""
        ...

    def dead_letters(self, limit: int = 100) -> list[tuple[str, bytes]]:
        """Up to ``limit`` dead letters: mail id and the payload as it was."""
        ...
