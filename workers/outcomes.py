"""A mail's state and outcome read back from the result backend (``mailguard send --wait``,
``mailguard outcome`` and the demo's table).

``send_mail`` ends in state ``SUCCESS`` with its outcome dict (status ``sent`` or ``dropped``)
or in state ``FAILURE`` by raising :class:`~workers.tasks.MailFailed` with the outcome dict as
``args[0]`` (status ``failed``); while it waits for a booked slot its state is ``DEFERRED``
with the outcome so far as meta, stored compact (its fields at their default left out:
:meth:`~mailer.outcomes.Outcome.as_waiting_dict`; :func:`outcome_of` gives it back whole).
Celery hands a failure back as the exception:
:func:`outcome_of` turns it back into the outcome dict.

A result backend that only its own process reads (the default ``cache+memory://``, or none)
tells another process nothing: :func:`results_shared` says whether this one can; the ledger and
the schedule then tell what they know (:func:`workers.cancelling.lookup`).

Celery is imported only for type checking: the CLI imports this module for every command.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mailer.outcomes import Outcome

if TYPE_CHECKING:
    from celery import Celery


def outcome_of(info: Any) -> Any:
    """A result's meta as an outcome: a failed mail's ``MailFailed(outcome)`` becomes its outcome
    dict, any other exception its text; a waiting mail's compact outcome
    (:meth:`~mailer.outcomes.Outcome.as_waiting_dict`) comes back with every field; any other
    meta is returned as it is."""
    if isinstance(info, BaseException):
        first = info.args[0] if info.args else None
        return first if isinstance(first, Mapping) else str(info)
    return whole(info)


def whole(meta: Any) -> Any:
    """A ``deferred`` outcome dict with every field (those a waiting mail's stored meta leaves
    out at their default); any other meta as it is, a malformed one included."""
    if not isinstance(meta, Mapping) or meta.get("status") != "deferred":
        return meta
    try:
        return Outcome.from_dict(dict(meta)).as_dict()
    except TypeError:  # not an outcome (no mail id or kind): shown as it is
        return meta


#: Result backend URL schemes whose results only their own process can read.
PROCESS_LOCAL_RESULTS = ("cache+memory:", "memory:", "disabled:", "rpc:")

#: Why a process cannot read another's results, as the commands say it.
NO_SHARED_RESULTS = "no result backend is set (MAILGUARD_RESULT_BACKEND)"


def results_shared(app: Celery) -> bool:
    """Whether ``app``'s result backend is one every process reads (``redis://``, a database):
    not one kept in this process only (``cache+memory://``, the default), nor ``rpc://``
    (results go to the caller alone), nor none."""
    url = app.conf.result_backend
    return bool(url) and not str(url).startswith(PROCESS_LOCAL_RESULTS)


def read_state(app: Celery, mail_id: str) -> tuple[str, Any]:
    """``mail_id``'s Celery state and its meta (:func:`outcome_of`) from ``app``'s backend.

    Raises what the result backend raises when it cannot be read.
    """
    result = app.AsyncResult(mail_id)
    return result.state, outcome_of(result.info)
