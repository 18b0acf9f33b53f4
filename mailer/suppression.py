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

from mailer.factory import build_reputation, build_suppressions
from mailer.records.reputation import Reputation
from mailer.records.suppression import Suppression, Suppressions
from mailer.records.suppression import events as _events
from mailer.settings import Settings

__all__ = ["record_event", "reputation_for", "suppressions_for"]

_lock = threading.Lock()
_built: dict[tuple[str, str | None], Suppressions] = {}
_reputations: dict[tuple[object, ...], Reputation | None] = {}


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


def reputation_for(settings: Settings) -> Reputation | None:
    """The workers' sender reputation for ``settings`` (None with ``MAILGUARD_REPUTATION``
    off), built once per process, on the suppression list's Redis."""
    if settings.reputation is None:
        return None
    suppressions_for(settings)  # refuses what it refuses, in one line
    where = (
        settings.effective_ledger_url,
        settings.reputation,
        settings.reputation_window,
        settings.reputation_min,
        settings.sender,
    )
    with _lock:
        found = _reputations.get(where)
        if found is None:
            found = build_reputation(settings)
            _reputations[where] = found
    return found


def record_event(
    address: str,
    event: str,
    *,
    detail: str = "",
    at: float | None = None,
    message_id: str | None = None,
    settings: Settings | None = None,
) -> Suppression | None:
    """Record a webhook's ``event`` (``bounced``, ``complained``, ``rejected`` suppress;
    ``soft_bounced``, ``deferred`` and the rest do nothing) for ``address`` in the workers'
    suppression list: the suppression in force afterwards, or None.

    With ``MAILGUARD_REPUTATION`` on, a ``bounced`` or ``complained`` event also counts
    against the sender of the mail sent with ``message_id`` (its Message-ID, as the mail
    carried it, or the id the ESP reports when that is the same), within the window; an event
    whose Message-ID is not found counts against ``MAILGUARD_SENDER``. A count may pause the
    sender's bulk kinds (an ERROR line says which rate crossed which threshold).

    ``settings`` default to the environment's (``Settings.from_env()``); ``detail`` is the
    ESP's reply, ``at`` the event's epoch seconds. Raises as
    :func:`mailer.records.suppression.events.record_event` does, and ``ValueError`` for
    unusable settings.
    """
    chosen = settings if settings is not None else Settings.from_env()
    entry = _events.record_event(
        suppressions_for(chosen),
        address,
        event,
        detail=detail,
        at=at,
        suppress_for=chosen.suppress_for,
    )
    reputation = reputation_for(chosen)
    if reputation is not None:
        reputation.count_event(event, message_id)
    return entry
