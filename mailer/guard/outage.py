"""A backend that does not answer: defer the mail with doubling backoff, one log line.

Used when the limiter or the ledger is down, or when several recipients found no common slot
(contended). Durations in seconds, from :class:`~mailer.guard.data.GuardConfig`
(``retry_backoff`` doubling up to ``max_backoff``). Not for a mail the relay refused: that one
backs off to ``retry_backoff_max`` within its kind's lifetime (:mod:`mailer.guard.retry_schedule`).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from mailer import defaults
from mailer import outcomes as why
from mailer.durations import human
from mailer.errors import BackendUnavailable, Contended, CorruptState
from mailer.guard.data import GuardConfig, log_fields
from mailer.outcomes import Outcome
from mailer.steps import Later, Progress

log = logging.getLogger("mailguard")

_WHAT = {
    why.LEDGER_UNAVAILABLE: "ledger unavailable",
    why.CONTENDED: "recipients contended, no common slot",
}


def backoff(config: GuardConfig, failures: int) -> float:
    """The wait in seconds after ``failures`` failed runs in a row (doubling, capped)."""
    return defaults.backoff(failures, first=config.retry_backoff, cap=config.max_backoff)


def backend_down(
    config: GuardConfig,
    base: Outcome,
    progress: Progress,
    exc: BackendUnavailable | Contended | CorruptState,
    reason: str,
) -> Later:
    """``deferred`` / ``reason`` with doubling backoff; counts the run in ``limiter_failures``.

    ``reason`` is ``ledger_unavailable``, ``limiter_unavailable`` (also for data in a limiter
    key that mailguard did not write: deferred whatever the fail mode) or ``contended``.
    """
    progress = replace(progress, limiter_failures=progress.limiter_failures + 1)
    wait = backoff(config, progress.limiter_failures)
    waiting = base.but(status="deferred", reason=reason, wait=wait, detail=str(exc))
    log.warning(
        "mail %s deferred %s: %s",
        base.mail_id,
        human(wait),
        _WHAT.get(reason, "limiter unavailable (fail_closed)"),
        extra=log_fields(waiting),
    )
    return Later(wait, waiting, progress)
