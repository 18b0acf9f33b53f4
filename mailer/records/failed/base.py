"""The protocol of the kept failed mails (:mod:`mailer.records.failed`: the story)."""

from __future__ import annotations

from typing import Protocol

#: The most mail ids :meth:`FailedStore.failed_since` answers at once.
SINCE_LIMIT = 10_000


class FailedStore(Protocol):
    """Payloads of failed mails by mail id, each for a retention. Every method is one atomic
    step; times are epoch seconds, a retention seconds. Raises
    :class:`~mailer.errors.BackendUnavailable` when its Redis is down."""

    def keep(self, mail_id: str, payload: bytes, *, failed_at: float, retention: float) -> bool:
        """Keep ``payload`` for ``retention`` seconds from now, unless ``mail_id`` is kept
        already (a redelivered copy of its failed run: the first keeps its time) or was retried
        (its marker stands). True when kept now."""
        ...

    def take(self, mail_id: str, retried_as: str, retention: float) -> bytes | None:
        """The payload of ``mail_id``, removed, with a marker naming ``retried_as`` left for
        ``retention`` seconds; None when nothing is kept (never kept, taken already, or past
        its retention). Of two callers at once, one gets the payload."""
        ...

    def give_back(
        self, mail_id: str, payload: bytes, *, failed_at: float, retention: float
    ) -> None:
        """Undo a :meth:`take` whose mail could not be enqueued: ``payload`` kept again (for
        ``retention`` seconds) and the marker removed."""
        ...

    def retried_as(self, mail_id: str) -> str | None:
        """The mail id ``mail_id`` was retried as, while its marker lasts; else None."""
        ...

    def failed_at(self, mail_id: str) -> float | None:
        """When the kept ``mail_id`` failed; None when nothing is kept for it."""
        ...

    def failed_since(self, since: float, limit: int = SINCE_LIMIT) -> list[str]:
        """The mail ids kept that failed at or after ``since``, oldest first (at most
        ``limit``)."""
        ...
