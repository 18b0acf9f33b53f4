"""Bounces and complaints from ESP webhooks into mailguard's suppression list, through
Anymail's ``tracking`` signal (``pip install 'celery-mailguard[anymail]'``).

.. code-block:: python

    # settings.py: Anymail's webhooks as Anymail documents them, and this app
    INSTALLED_APPS = [..., "anymail", "workers.django_tracking.MailguardTracking"]
    # urls.py: path("anymail/", include("anymail.urls"))

Every tracking event Anymail receives (Postmark, Mailgun, SES, SendGrid...: one normalised
event) goes to :func:`mailer.records.suppression.events.record_event` with the process's
``MAILGUARD_*`` settings: ``bounced`` (a hard bounce) suppresses the recipient for
``MAILGUARD_SUPPRESS_FOR``, ``complained`` for ever (until ``mailguard unsuppress``),
``rejected`` for ``MAILGUARD_SUPPRESS_FOR``; a soft bounce (Anymail's ``deferred``, or a
``bounced`` event the ESP marks soft or transient, or whose reply is a 4xx) and every other
event do nothing. The suppression counts from the event's time. An address mailguard never
sent to is suppressed all the same.

The list is the workers' (the ledger's Redis): a ``memory://`` ledger, or settings a worker
would refuse, stop Django at start with one line (``ImproperlyConfigured``). When the ledger's
Redis is down the receiver raises, the webhook answers 500 and the ESP sends the event again.
Logs name a recipient by its keyed hash only. With ``MAILGUARD_REPUTATION`` on, a hard bounce
or complaint also counts against the sender of the mail it is about, found by the event's
``message_id`` (:mod:`mailer.records.reputation`). Another stack: call
:func:`mailer.suppression.record_event` from its own webhook view.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured

from mailer.errors import InvalidAddress
from mailer.guard import iso
from mailer.mail import temporary_reply
from mailer.records.suppression import SUPPRESSING, record_event
from mailer.suppression import reputation_for, suppressions_for
from workers.process import settings as process_settings

log = logging.getLogger("mailguard")

#: Words by which an ESP marks a bounce as soft (Postmark ``SoftBounce``, Mandrill and Brevo
#: ``soft_bounce``, MailerSend ``activity.soft_bounced``, SES ``Transient``).
_SOFT = ("soft", "transient")
#: The ESP's own fields that may name the kind of bounce.
_LABELS = ("Type", "type", "event", "bounceType")


def event_name(event: Any) -> str:
    """mailguard's name for an Anymail tracking ``event``: its ``event_type``, but
    ``soft_bounced`` for a ``bounced`` event the ESP marks soft or transient, or whose reply
    is temporary (4xx)."""
    name = str(event.event_type)
    if name != "bounced":
        return name
    esp = event.esp_event if isinstance(event.esp_event, Mapping) else {}
    labels = [esp.get(field) for field in _LABELS] + [event.description]
    if any(isinstance(label, str) and any(w in label.lower() for w in _SOFT) for label in labels):
        return "soft_bounced"
    return "soft_bounced" if temporary_reply(event.mta_response or "") else name


def on_tracking(sender: Any, event: Any, esp_name: str, **kwargs: Any) -> None:
    """Anymail's ``tracking`` receiver: a bounce, complaint or rejection suppresses the
    recipient (see the module doc). Raises :class:`~mailer.errors.BackendUnavailable` when the
    ledger's Redis is down (the ESP retries)."""
    name = event_name(event)
    if name not in SUPPRESSING:
        return
    settings = process_settings.current()
    suppressions = suppressions_for(settings)
    if not event.recipient:
        log.warning("%s %s event without a recipient: nothing suppressed", esp_name, name)
        return
    detail = event.mta_response or event.description or event.reject_reason or ""
    at = event.timestamp.timestamp() if event.timestamp is not None else None
    try:
        key = suppressions.key_of(event.recipient)
        entry = record_event(
            suppressions,
            event.recipient,
            name,
            detail=f"{esp_name} {detail}".strip(),
            at=at,
            suppress_for=settings.suppress_for,
        )
    except InvalidAddress as exc:
        log.warning("%s %s event for a bad address (%s): nothing suppressed", esp_name, name, exc)
        return
    reputation = reputation_for(settings)
    if reputation is not None:  # the sender's rates: the mail found by its Message-ID
        reputation.count_event(name, event.message_id)
    if entry is not None:
        length = "for ever" if entry.forever else f"until {iso(entry.until)}"
        log.warning(
            "recipient %s suppressed %s after a %s %s event",
            key,
            length,
            esp_name,
            name,
            extra={"recipient": key},
        )


def connect() -> None:
    """Connect :func:`on_tracking` to Anymail's ``tracking`` signal (once, however often
    called): for a project that wires it from its own ``AppConfig.ready``. Raises
    ``ImproperlyConfigured`` (one line) without Anymail or with settings that cannot work."""
    try:
        from anymail.signals import tracking  # noqa: PLC0415 - an optional dependency
    except ImportError:
        raise ImproperlyConfigured(
            "workers.django_tracking needs django-anymail: pip install 'celery-mailguard[anymail]'"
        ) from None
    problem = process_settings.refusal()
    if problem is not None:
        raise ImproperlyConfigured(problem)
    try:
        suppressions_for(process_settings.current())
    except ValueError as exc:
        raise ImproperlyConfigured(f"mailguard: {exc}") from None
    tracking.connect(on_tracking, dispatch_uid="mailguard.suppression")


class MailguardTracking(AppConfig):  # type: ignore[misc] # Django ships no type hints
    """Add ``"workers.django_tracking.MailguardTracking"`` to ``INSTALLED_APPS`` (after
    ``"anymail"``): webhook bounces and complaints suppress their addresses."""

    name = "workers.django_tracking"
    label = "mailguard_tracking"
    verbose_name = "mailguard: bounces and complaints from webhooks"

    def ready(self) -> None:
        connect()
