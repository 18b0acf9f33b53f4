"""The one registry of transports, by the name ``MAILGUARD_TRANSPORT`` gives: ``smtp`` (the
default; ``MAILGUARD_SMTP_URL``'s scheme picks ``console://`` or ``memory://`` too), ``django``
(a Django email backend), ``anymail`` (any ESP Anymail ships, without a Django project) and
``ses`` (Amazon SES v2).

A builder takes :class:`TransportOptions` and answers a
:class:`~mailer.mail.transports.base.Transport`, or raises ``ValueError`` in one line (a
backend that does not import): the worker refuses to start with it. What a variable alone
decides (SES's region, Anymail's ESP) is checked earlier, with the settings
(:mod:`mailer.settings_checks`).

Optional packages (Django, Anymail, boto3) are imported by the builder that needs them, never here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from mailer import defaults
from mailer.mail.transports.base import Transport
from mailer.mail.transports.smtp_tls import TlsFileError, TlsOptions, client_context

#: The transport used when ``MAILGUARD_TRANSPORT`` is not set.
DEFAULT = "smtp"
#: The Django backend the ``django`` transport uses when ``MAILGUARD_DJANGO_BACKEND`` is not set.
DJANGO_SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"


@dataclass(frozen=True)
class TransportOptions:
    """What a transport may be built from (the ``MAILGUARD_*`` settings that concern it).
    ``retry_holds`` False: the guard holds on throttling, the transport must not retry it at
    once. ``hold_max`` (seconds) is the sender hold of a paused provider account. ``smtp_tls``
    is the SMTP transport's own TLS trust and client certificate, ``smtp_ehlo`` its EHLO name
    (None: the host's FQDN), ``smtp_session_mails`` and ``smtp_session_idle`` (seconds) the
    bounds of one SMTP connection's reuse."""

    smtp_url: str = "console://"
    attempts: int = 3
    retry_holds: bool = True
    hold_max: float = 900.0
    django_backend: str | None = None
    ses_region: str | None = None
    ses_endpoint_url: str | None = None
    ses_configuration_set: str | None = None
    anymail_esp: str | None = None
    smtp_tls: TlsOptions = field(default_factory=TlsOptions)
    smtp_ehlo: str | None = None
    smtp_session_mails: int = defaults.SMTP_SESSION_MAILS
    smtp_session_idle: float = defaults.SMTP_SESSION_IDLE


Builder = Callable[[TransportOptions], Transport]


def _smtp(options: TransportOptions) -> Transport:
    from mailer.mail.transports.console import ConsoleTransport  # noqa: PLC0415
    from mailer.mail.transports.memory import MemoryTransport  # noqa: PLC0415
    from mailer.mail.transports.smtp import SmtpTransport  # noqa: PLC0415

    scheme = options.smtp_url.split(":", 1)[0].lower()
    if scheme == "console":
        return ConsoleTransport(sys.stderr)
    if scheme == "memory":
        return MemoryTransport()
    try:
        context = None if options.smtp_tls.default else client_context(options.smtp_tls)
    except TlsFileError as exc:
        raise ValueError(f"MAILGUARD_SMTP_{exc.option.upper()}: {exc}") from None
    try:
        return SmtpTransport.from_url(
            options.smtp_url,
            max_attempts=options.attempts,
            retry_holds=options.retry_holds,
            ssl_context=context,
            local_hostname=options.smtp_ehlo,
            session_mails=options.smtp_session_mails,
            session_idle=options.smtp_session_idle,
        )
    except ValueError as exc:
        raise ValueError(f"MAILGUARD_SMTP_URL: {exc}") from None


def _django(options: TransportOptions) -> Transport:
    from mailer.mail.transports.django_backend import DjangoTransport  # noqa: PLC0415

    backend = options.django_backend or DJANGO_SMTP_BACKEND
    try:
        return DjangoTransport(backend, max_attempts=options.attempts, paused_hold=options.hold_max)
    except ValueError as exc:
        raise ValueError(f"MAILGUARD_DJANGO_BACKEND: {exc}") from None


def _ses(options: TransportOptions) -> Transport:
    from mailer.mail.transports.ses import SesTransport  # noqa: PLC0415

    try:  # MAILGUARD_SES_REGION is checked with the settings; options made by hand: below
        return SesTransport(
            options.ses_region or "",
            endpoint_url=options.ses_endpoint_url,
            configuration_set=options.ses_configuration_set,
            max_attempts=options.attempts,
            paused_hold=options.hold_max,
        )
    except ValueError as exc:
        raise ValueError(f"MAILGUARD_TRANSPORT=ses: {exc}") from None


def _anymail(options: TransportOptions) -> Transport:
    from mailer.mail.transports.anymail import AnymailTransport  # noqa: PLC0415

    try:
        return AnymailTransport(
            options.anymail_esp or "", max_attempts=options.attempts, paused_hold=options.hold_max
        )
    except ValueError as exc:
        raise ValueError(f"MAILGUARD_TRANSPORT=anymail: {exc}") from None


_BUILDERS: dict[str, Builder] = {
    "smtp": _smtp,
    "django": _django,
    "ses": _ses,
    "anymail": _anymail,
}


def names() -> tuple[str, ...]:
    """The registered transport names, in registration order."""
    return tuple(_BUILDERS)


def register(name: str, builder: Builder) -> None:
    """Add (or replace) the transport ``name``: for a transport of one's own, registered before
    the settings are read (a worker's start)."""
    if not name or not name.isidentifier():
        raise ValueError(f"a transport name must be a word, got {name!r}")
    _BUILDERS[name] = builder


def build(name: str, options: TransportOptions) -> Transport:
    """The transport ``name`` built from ``options``; ``ValueError`` in one line for an unknown
    name or options it cannot use."""
    builder = _BUILDERS.get(name)
    if builder is None:
        raise ValueError(
            f"MAILGUARD_TRANSPORT must be one of {', '.join(_BUILDERS)}, got {name!r:.40}"
        )
    return builder(options)
