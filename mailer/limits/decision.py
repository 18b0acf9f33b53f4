"""What the limiter answers: a :class:`Decision`, plain data that a planner turns into action.

The remaining wait keeps one name from the Lua reply to the Celery call: ``wait_ms`` (ms) and
``wait`` (seconds); ``at``/``due`` are moments (epoch seconds), ``max_wait``/``max_wait_ms`` the
longest wait a caller accepts; Celery's ``countdown``/``eta`` appear only where ``workers/``
publishes a task (``workers/tasks.py`` caps the countdown). Glossary: docs/reference/limiter.md.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

from mailer.limits.policy import Tier

_RENAMED = "Decision.{} is deprecated: read Decision.{} (the same value)"


class Decision(NamedTuple):
    """The limiter's answer for one key at one moment.

    Times are kept as whole milliseconds (``at_ms``, ``wait_ms``) so that they are exact;
    ``at`` and ``wait`` give the same values in seconds.

    - ``allowed``: the mail may go now (an admission was recorded, unless this came from
      ``peek``).
    - ``booked``: refused now, but a future slot was reserved at ``at`` (reservations,
      ``max_wait > 0``). Send at ``at``; acquiring again with the same mail id then allows it.
    - neither: refused; nothing was consumed. ``at`` is the earliest time a fresh attempt can
      be admitted if nothing else is admitted meanwhile.
    - ``wait_ms``: the remaining wait, ``at_ms - now`` (0 when allowed), exact: an attempt at
      ``now + wait`` is admitted, one a millisecond earlier is not.
    - ``tier``: the tier that binds (the one with the longest wait); ``None`` when allowed, when
      an existing slot of the same mail id was returned, or when only the order of already
      booked mails binds.
    - ``remaining``: per tier of the policy (sorted by window; scope by scope, recipient first,
      for a scoped policy), how many more admissions the window ending now (at ``at`` for a
      booked mail) still holds, bookings included.
    - ``scope``: the scope of the binding tier, ``None`` when ``tier`` is.
    """

    allowed: bool
    booked: bool
    at_ms: int
    wait_ms: int
    tier: Tier | None
    remaining: tuple[int, ...]
    #: The scope of ``tier`` (``recipient``, ``domain``, ``sender``, ``tenant``); None with it.
    scope: str | None = None

    @property
    def at(self) -> float:
        """Epoch seconds of the admission, the booking, or (refused) the earliest admission."""
        return self.at_ms / 1000

    @property
    def wait(self) -> float:
        """Seconds to wait before the mail may go (0.0 when allowed), rounded up to the ms."""
        return self.wait_ms / 1000

    @property
    def retry_after_ms(self) -> int:
        """Deprecated alias of :attr:`wait_ms` (reading only); emits ``DeprecationWarning``."""
        warnings.warn(_RENAMED.format("retry_after_ms", "wait_ms"), DeprecationWarning, 2)
        return self.wait_ms

    @property
    def retry_after(self) -> float:
        """Deprecated alias of :attr:`wait` (reading only); emits ``DeprecationWarning``."""
        warnings.warn(_RENAMED.format("retry_after", "wait"), DeprecationWarning, 2)
        return self.wait

    @property
    def refused(self) -> bool:
        """Neither allowed now nor booked for later."""
        return not (self.allowed or self.booked)


def new_decision(fields: tuple[object, ...]) -> Decision:
    """A :class:`Decision` of its seven fields in order, built without ``NamedTuple``'s
    Python-level ``__new__`` (a measurable share of an in-process decision). Stores only: the
    fields are not checked."""
    return tuple.__new__(Decision, fields)


def backlog_full(decision: Decision) -> bool:
    """Whether ``decision`` refused a mail because a shared scope's key already keeps
    ``MAILGUARD_MAX_BOOKINGS`` entries: refused, with a ``scope`` but no ``tier`` (a refusal
    by a tier names it; one by the order of bookings names no scope)."""
    return decision.refused and decision.tier is None and decision.scope is not None


def backlog_detail(decision: Decision) -> str:
    """The one-line reason of a :func:`backlog_full` refusal, naming the bound's variable."""
    return (
        f"the {decision.scope} scope keeps MAILGUARD_MAX_BOOKINGS entries already: no more "
        "bookings until it drains (raise MAILGUARD_MAX_BOOKINGS to allow a longer backlog)"
    )
