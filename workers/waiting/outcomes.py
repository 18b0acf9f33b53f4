"""A mail's state and outcome read back from the result backend (``mailguard send --wait``,
``mailguard outcome`` and the demo's table).

``send_mail`` ends in state ``SUCCESS`` with its outcome dict (status ``sent`` or ``dropped``)
or in state ``FAILURE`` by raising :class:`~workers.tasks.MailFailed` with the outcome dict as
``args[0]`` (status ``failed``); while it waits for a booked slot its state is ``DEFERRED``
with the outcome so far as meta, stored compact (:func:`store_waiting`: only what the record's
id and state do not already say, :meth:`~mailer.outcomes.Outcome.as_waiting_dict`, and none of
Celery's empty fields); :func:`outcome_of` gives it back whole. Celery hands a failure back as
the exception: :func:`outcome_of` turns it back into the outcome dict.

A result backend that only its own process reads (the default ``cache+memory://``, or none)
tells another process nothing: :func:`results_shared` says whether this one can; the ledger and
the schedule then tell what they know (:func:`workers.waiting.cancelling.lookup`).

Celery is imported only for type checking: the CLI imports this module for every command.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mailer.outcomes import Outcome
from mailer.steps import DEFERRED

if TYPE_CHECKING:
    from celery import Celery
    from celery.backends.base import Backend


def outcome_of(info: Any, state: str | None = None, task_id: str | None = None) -> Any:
    """A result's meta as an outcome: a failed mail's ``MailFailed(outcome)`` becomes its outcome
    dict, any other exception its text; a waiting mail's compact outcome (the meta of task
    ``task_id`` in state ``DEFERRED``, :meth:`~mailer.outcomes.Outcome.as_waiting_dict`) comes
    back with every field; any other meta is returned as it is."""
    if isinstance(info, BaseException):
        first = info.args[0] if info.args else None
        return first if isinstance(first, Mapping) else str(info)
    return whole(info, state, task_id)


def whole(meta: Any, state: str | None = None, task_id: str | None = None) -> Any:
    """A ``deferred`` outcome dict with every field: the meta of task ``task_id`` in state
    ``DEFERRED`` (:meth:`~mailer.outcomes.Outcome.from_waiting_dict`), or one that says
    ``status: deferred`` itself (as 0.1.0 stored it); any other meta as it is, a
    malformed one included."""
    if not isinstance(meta, Mapping) or meta.get("status", "deferred") != "deferred":
        return meta
    try:
        if state == DEFERRED and task_id is not None:
            return Outcome.from_waiting_dict(dict(meta), task_id).as_dict()
        if meta.get("status") == "deferred":
            return Outcome.from_dict(dict(meta)).as_dict()
    except TypeError:  # not an outcome (no mail id or kind, a field unknown): shown as it is
        return meta
    return meta


#: JSON as the record is written when the backend's serializer is JSON: no spaces.
_COMPACT = (",", ":")
#: What a key-value result backend (Redis, memcached, the in-memory cache) answers.
_KEY_VALUE = ("get_key_for_task", "get", "set", "decode")


def store_waiting(backend: Backend, task_id: str, outcome: Outcome) -> None:
    """Store task ``task_id``'s ``DEFERRED`` state with ``outcome`` (a ``deferred`` one) as
    meta, compact: :meth:`~mailer.outcomes.Outcome.as_waiting_dict`, and on a key-value
    backend (Redis) only Celery's ``status`` and ``result``, JSON without spaces (about 100 B
    for a booked mail, 216 B of ``MEMORY USAGE``, where ``update_state`` would write the
    whole outcome with ``traceback``, ``children``, ``date_done`` and ``task_id`` empty or
    repeated, and with ``result_extended`` the whole call). ``AsyncResult`` reads every one
    of those with ``.get``. As ``store_result`` does, a ``SUCCESS`` already stored is not
    overwritten; other backends store it through ``store_result``. Raises what the backend
    raises."""
    meta = outcome.as_waiting_dict(task_id)
    if not all(callable(getattr(backend, name, None)) for name in _KEY_VALUE):
        backend.store_result(task_id, meta, DEFERRED)
        return
    kv: Any = backend  # a KeyValueStoreBackend (its methods are not in Backend's stubs)
    key = kv.get_key_for_task(task_id)
    stored = kv.get(key)  # as Celery's _store_result reads it, without its eager warning
    if stored and kv.decode(stored).get("status") == "SUCCESS":
        return  # a run already ended it: its outcome stays (Celery's own rule)
    record = {"status": DEFERRED, "result": meta}
    if kv.serializer == "json" and not getattr(kv, "compression", None):
        payload: Any = json.dumps(record, separators=_COMPACT)
    else:
        payload = kv.encode(record)
    kv.set(key, payload)


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
    state = result.state
    return state, outcome_of(result.info, state, mail_id)
