"""Failed mails kept and sent again: ``send_mail``'s failed end keeps the mail's payload
(:func:`keep`) for ``MAILGUARD_FAILED_RETENTION``; ``mailguard retry`` enqueues it again once
(:func:`retry`).

The payload is the task's call as the schedule parks it (:class:`workers.waiting.payload.Parked`,
without progress: the retry is a new mail's first run), kept in the ledger's Redis
(:mod:`mailer.records.failed`). A retried mail goes under a **new mail id linked to the old
one**, ``<old id>.retry1`` (``.retry2`` for a retry of that, and so on; an id too long for
``send_mail``'s 128 characters is replaced by a UUID derived from it): the failed mail's
outcome stays in the ledger as it was, the new mail has its own, and the kept marker names
the new id. The new id is the same however often the command runs, so even a copy enqueued
twice would be one mail to the ledger; the atomic take already enqueues one.

A retry refuses, in one line, a mail that was sent or dropped, one retried already (naming the
new id), one whose payload is past its retention, and one never kept.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from mailer.errors import BackendUnavailable
from mailer.records.failed import FailedStore, failed_from_url
from mailer.records.ledger import Ledger
from mailer.settings import Settings
from workers.process.per_process import PerProcess
from workers.waiting.payload import Parked

log = logging.getLogger("mailguard")

#: The longest mail id ``send_mail`` takes (:mod:`mailer.mail.arguments`).
MAX_MAIL_ID = 128
#: The keywords of a run that a retry does not carry: the new mail starts afresh.
RUN_ONLY = ("_progress", "_requested_at")
_RETRY_SUFFIX = re.compile(r"^(?P<root>.+)\.retry(?P<n>[0-9]{1,6})$")
#: Names a UUID derived from a mail id too long to carry a suffix.
_LONG_IDS = uuid.UUID("6f1d4a52-8c3e-4b7a-9a51-2e0f3c9d7b14")

#: Enqueues a mail again: ``publish(args, kwargs, task_id)``.
Publish = Callable[[list[Any], dict[str, Any], str], object]

#: This process's stores of failed mails, by ledger URL.
_stores: PerProcess[str, FailedStore] = PerProcess()


class NotRetried(Exception):
    """A retry refused; ``args[0]`` says why in one line."""


def store_for(settings: Settings) -> FailedStore:
    """The kept failed mails on the ledger's URL (built once per process and URL)."""
    url = settings.effective_ledger_url
    return _stores.built(url, lambda: failed_from_url(url))


def keep(settings: Settings, request: Any, mail_id: str) -> bool:
    """Keep the payload of ``mail_id``, whose run (Celery's ``request``: its id, args and
    kwargs) ended ``failed``, for the retention (nothing with it ``off``). Never raises: a
    store that is down is logged (the mail stays failed, not kept). True when kept now."""
    retention = settings.failed_retention
    if retention is None:
        return False
    call = {k: v for k, v in (request.kwargs or {}).items() if k not in RUN_ONLY}
    now = time.time()
    entry = Parked(str(request.id), list(request.args or ()), call | {"mail_id": mail_id}, now)
    try:
        kept = store_for(settings).keep(mail_id, entry.encode(), failed_at=now, retention=retention)
    except BackendUnavailable as exc:
        log.warning("mail %s: failed, its payload not kept: %s", mail_id, exc)
        return False
    if kept:
        log.info("mail %s: failed, kept for a retry", mail_id, extra={"mail_id": mail_id})
    return kept


def retry_id(mail_id: str) -> str:
    """The mail id a retry of ``mail_id`` goes under: ``<id>.retry1``, or the next number for
    a retried mail's own id (``a.retry1`` -> ``a.retry2``)."""
    root, number = mail_id, 1
    match = _RETRY_SUFFIX.match(mail_id)
    if match:
        root, number = match["root"], int(match["n"]) + 1
    new = f"{root}.retry{number}"
    if len(new) > MAX_MAIL_ID:
        new = f"{uuid.uuid5(_LONG_IDS, root)}.retry{number}"
    return new


def retry(settings: Settings, mail_id: str, ledger: Ledger, publish: Publish) -> str:
    """Enqueue the failed ``mail_id`` again, once, under :func:`retry_id`; the new mail id.
    Raises :class:`NotRetried` (one line) and :class:`~mailer.errors.BackendUnavailable`."""
    store = store_for(settings)
    earlier = store.retried_as(mail_id)
    if earlier is not None:
        raise NotRetried(f"mail {mail_id} was retried already, as {earlier}")
    recorded = ledger.recorded(mail_id)
    if recorded is not None and recorded.status != "failed":
        reason = f"/{recorded.reason}" if recorded.reason else ""
        raise NotRetried(
            f"mail {mail_id} ended {recorded.status}{reason}: only a failed mail is retried"
        )
    new_id = retry_id(mail_id)
    retention = settings.failed_retention or 0.0
    payload = store.take(mail_id, new_id, max(retention, 60.0))
    if payload is None:
        raise NotRetried(_not_kept(settings, store, mail_id, failed=recorded is not None))
    entry = Parked.decode(payload, mail_id)
    kwargs = entry.kwargs | {"mail_id": new_id}
    try:
        publish(entry.args, kwargs, new_id)
    except Exception as exc:
        store.give_back(mail_id, payload, failed_at=entry.due, retention=max(retention, 60.0))
        raise NotRetried(f"mail {mail_id} not retried, still kept: {exc}") from exc
    log.info("mail %s retried as %s", mail_id, new_id, extra={"mail_id": mail_id})
    return new_id


def _not_kept(settings: Settings, store: FailedStore, mail_id: str, *, failed: bool) -> str:
    """Why ``mail_id`` has no payload to take, in one line."""
    earlier = store.retried_as(mail_id)  # another retry took it a moment ago
    if earlier is not None:
        return f"mail {mail_id} was retried already, as {earlier}"
    if settings.failed_retention is None:
        return f"mail {mail_id}: no payload kept (MAILGUARD_FAILED_RETENTION is off)"
    if failed:
        return (
            f"mail {mail_id} failed, but its payload is no longer kept "
            "(past MAILGUARD_FAILED_RETENTION)"
        )
    return f"no failed mail {mail_id} is kept (unknown, not failed, or past its retention)"


def failed_since(settings: Settings, since: float) -> list[str]:
    """The kept failed mails that failed at or after ``since`` (epoch s), oldest first."""
    return store_for(settings).failed_since(since)
