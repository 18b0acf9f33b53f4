"""Bounces and complaints reported after the fact (an ESP's webhook, a feedback loop) into the
suppression list: :func:`record_event`, framework-free (``workers.django_tracking`` feeds it
Anymail's ``tracking`` signal; another stack calls it from its own webhook view).

| event | what it does |
|---|---|
| ``bounced`` | a hard bounce: suppressed for ``suppress_for`` (``MAILGUARD_SUPPRESS_FOR``) |
| ``complained`` | a spam complaint: suppressed for ever, until lifted by hand |
| ``rejected`` | the ESP refused to send to it: suppressed for ``suppress_for`` |
| ``soft_bounced``, ``deferred`` | nothing: the mailbox exists, the next mail may go |
| anything else Anymail names (``delivered``, ``opened``, ...) | nothing |

Suppression is about the address: an event for an address mailguard never sent to is
recorded all the same. Not for SMTP replies during a send: the guard suppresses on those
itself (:mod:`mailer.guard.gates.suppression`).
"""

from __future__ import annotations

from mailer.defaults import SUPPRESS_FOR
from mailer.records.suppression.base import FOREVER, Source, Suppression
from mailer.records.suppression.suppressions import Suppressions

#: The events that suppress, and the source each is recorded with.
SUPPRESSING: dict[str, Source] = {
    "bounced": "bounce",
    "complained": "complaint",
    "rejected": "rejected",
}
#: The events that leave the address alone (Anymail's other ``EventType`` values too).
IGNORED = frozenset(
    {
        "soft_bounced",
        "deferred",
        "queued",
        "sent",
        "delivered",
        "autoresponded",
        "opened",
        "clicked",
        "unsubscribed",
        "subscribed",
        "failed",
        "unknown",
    }
)


def record_event(
    suppressions: Suppressions,
    address: str,
    event: str,
    *,
    detail: str = "",
    at: float | None = None,
    suppress_for: float = SUPPRESS_FOR,
) -> Suppression | None:
    """Record ``event`` for ``address``: the suppression in force afterwards, or None for an
    event that suppresses nothing.

    ``detail`` (the ESP's reply or description, kept as the cause, 300 characters at most),
    ``at`` (epoch seconds of the event: the suppression counts from then; default now).
    ``ValueError`` for an event name neither suppressing nor ignored (a typo must not pass
    silently), ``InvalidAddress`` for an address that is not one,
    :class:`~mailer.errors.BackendUnavailable` when the ledger's Redis is down (let the webhook
    answer an error: the ESP sends the event again).
    """
    source = SUPPRESSING.get(event)
    if source is None:
        if event in IGNORED:
            return None
        known = ", ".join(sorted({*SUPPRESSING, *IGNORED}))
        raise ValueError(f"unknown event {event[:40]!r}; known: {known}")
    seconds = FOREVER if source == "complaint" else suppress_for
    cause = f"{event}: {detail}" if detail else event
    return suppressions.record(address, seconds=seconds, cause=cause, source=source, at=at)
