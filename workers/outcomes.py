"""A mail's state and outcome read back from the result backend (``mailguard send --wait``,
``mailguard outcome`` and the demo's table).

``send_mail`` ends in state ``SUCCESS`` with its outcome dict (status ``sent`` or ``dropped``)
or in state ``FAILURE`` by raising :class:`~workers.tasks.MailFailed` with the outcome dict as
``args[0]`` (status ``failed``); while it waits for a booked slot its state is ``DEFERRED``
with the outcome so far as meta. Celery hands a failure back as the exception:
:func:`outcome_of` turns it back into the outcome dict.

Celery is imported only for type checking: the CLI imports this module for every command.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery import Celery


def outcome_of(info: Any) -> Any:
    """A result's meta as an outcome: a failed mail's ``MailFailed(outcome)`` becomes its outcome
    dict, any other exception its text; any other meta is returned as it is."""
    if isinstance(info, BaseException):
        first = info.args[0] if info.args else None
        return first if isinstance(first, Mapping) else str(info)
    return info


def read_state(app: Celery, mail_id: str) -> tuple[str, Any]:
    """``mail_id``'s Celery state and its meta (:func:`outcome_of`) from ``app``'s backend.

    Raises what the result backend raises when it cannot be read.
    """
    result = app.AsyncResult(mail_id)
    return result.state, outcome_of(result.info)
