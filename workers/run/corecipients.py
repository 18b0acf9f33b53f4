"""The copies of a mail that retry, each alone, the recipients the relay refused for a time at
``RCPT`` while it took the mail for the others (:mod:`mailer.guard.corecipients`).

:func:`run` is one run through the guard followed by those copies' enqueueing: after the
mail's outcome is recorded, so a run repeated after a crash (which answers the recorded
outcome) enqueues them again, and each copy's ledger claim (its mail id ``<mail id>/<n>``,
also its task id) sends it once however often it is enqueued. A copy's first run comes
``MAILGUARD_RETRY_BACKOFF`` after the refusal (the first wait of any mail the relay put off);
then it is a mail of its own, judged by the limiter, retried with backoff until its kind's
lifetime.
"""

from __future__ import annotations

import logging
from dataclasses import fields
from typing import Any

from mailer.guard import MailRequest, copies
from mailer.outcomes import Outcome
from mailer.steps import Finish, Progress, Step
from workers.run.state import guard

log = logging.getLogger("mailguard")

#: The request's fields that ``send_mail`` takes as keywords (``to`` is its first argument).
_KEYWORDS = tuple(f.name for f in fields(MailRequest) if f.name != "to")


def run(task: Any, request: MailRequest, progress: Progress) -> Step:
    """One run of ``request`` through this process's guard; a ``sent`` mail's copies for its
    temporarily refused recipients are then enqueued through ``task`` (``send_mail``)."""
    step = guard().process(request, progress)
    if isinstance(step, Finish) and step.outcome.refused:
        enqueue_copies(task, request, step.outcome)
    return step


def enqueue_copies(task: Any, request: MailRequest, outcome: Outcome) -> int:
    """Enqueue a copy of ``request`` for each recipient ``outcome`` says was refused for a
    time; how many were enqueued. A copy that cannot be enqueued is logged (ERROR, its mail
    id), never raised: the mail itself was sent."""
    stores = guard()
    hashed = stores.limiter.storage_key
    made = copies(request, outcome, stores.config.rules, lambda key: hashed("recipient", key))
    wait = stores.config.retry_backoff
    enqueued = 0
    for copy in made:
        kwargs = {name: getattr(copy, name) for name in _KEYWORDS}
        kwargs = {name: value for name, value in kwargs.items() if value is not None}
        try:
            task.apply_async(args=(copy.to,), kwargs=kwargs, task_id=copy.mail_id, countdown=wait)
        except Exception as exc:  # whatever the broker raises: the mail itself was sent
            log.error(
                "mail %s: its copy %s for a refused recipient was not enqueued: %s",
                request.mail_id,
                copy.mail_id,
                exc,
                extra={"mail_id": copy.mail_id},
            )
            continue
        enqueued += 1
    return enqueued
