"""The public path for bounces and complaints reported by webhooks, from any stack:
:func:`record_event` with the workers' settings (``MAILGUARD_*``).

>>> from mailer.suppression import record_event
>>> record_event("ada@example.com", "bounced", detail="550 5.1.1 user unknown")  # doctest: +SKIP

With Django and Anymail, ``workers.django_tracking`` calls it for every ``tracking`` event.
The rules (which events suppress, and for how long) are in
:mod:`mailer.records.suppression.events`; a caller with its own
:class:`~mailer.records.suppression.Suppressions` calls that module's ``record_event``.
"""

from __future__ import annotations

import threading

from mailer.factory import build_suppressions
from mailer.records.suppression import Suppression, Suppressions
from mailer.records.suppression import events as _events
from mailer.settings import Settings

__all__ = ["record_event", "suppressions_for"]

_lock = threading.Lock()
_built: dict[tuple[str, str | None], Suppressions] = {}


def suppressions_for(settings: Settings) -> Suppressions:
    """The workers' suppression list (the ledger's Redis) for ``settings``, built once per
    process (per ledger URL and secret). ``ValueError`` (one line naming the variable) for a
    memory ledger, which no worker would see, and for settings a worker would refuse."""
    where = (settings.effective_ledger_url, settings.secret)
    with _lock:
        found = _built.get(where)
        if found is None:
            for problem in settings.problems():
                raise ValueError(problem)
            if settings.effective_ledger_url.startswith("memory:"):
                raise ValueError(
                    "MAILGUARD_LEDGER_URL (or MAILGUARD_LIMITER_URL) is memory://: a suppression "
                    "recorded here would stay in this process; set the workers' shared redis://"
                )
            found = _built[where] = build_suppressions(settings)
        return found


def record_event(
    address: str,
    event: str,
    *,
    detail: str = "",
    at: float | None = None,
    settings: Settings | None = None,
) -> Suppression | None:
    """Record a webhook's ``event`` (``bounced``, ``complained``, ``rejected`` suppress;
    ``soft_bounced``, ``deferred`` and the rest do nothing) for ``address`` in the workers'
    suppression list: the suppression in force afterwards, or None.

    ``settings`` default to the environment's (``Settings.from_env()``); ``detail`` is the
    ESP's reply, ``at`` the event's epoch seconds. Raises as
    :func:`mailer.records.suppression.events.record_event` does, and ``ValueError`` for
    unusable settings.
    """
    chosen = settings if settings is not None else Settings.from_env()
    return _events.record_event(
        suppressions_for(chosen),
        address,
        event,
        detail=detail,
        at=at,
        suppress_for=chosen.suppress_for,
    )
