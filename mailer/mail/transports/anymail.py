"""Any ESP that Anymail ships (Postmark, Mailgun, SendGrid, Brevo...), from any Celery app, with
no Django project: ``MAILGUARD_TRANSPORT=anymail``, ``MAILGUARD_ANYMAIL_ESP=postmark`` and
Anymail's own setting names as environment variables (``ANYMAIL_POSTMARK_SERVER_TOKEN``).

The transport configures what Anymail needs inside the worker: when the process has no Django
settings (no ``DJANGO_SETTINGS_MODULE``, nothing configured), ``settings.configure`` with
``ANYMAIL`` built from the ``ANYMAIL_*`` variables, ``EMAIL_BACKEND`` the ESP's backend, UTC and
Django's logging left alone. The ESP's variables are also handed to each backend instance, so a
worker inside a Django project sends with them too. Values ``true`` / ``false`` (any case) become
booleans, ``ANYMAIL_REQUESTS_TIMEOUT`` seconds.

Sending, the fields an ESP's API gets and the answers' reactions are the ``django`` transport's
(:class:`~mailer.mail.transports.django_backend.DjangoTransport`,
:mod:`~mailer.mail.transports.anymail_errors`). Refused at a worker's start, in one line: Anymail
not installed, an ESP Anymail does not ship, a required ``ANYMAIL_*`` setting missing.
Not for Anymail's ``test`` and ``console`` backends (nothing is delivered; the console one
prints addresses), nor ``ANYMAIL_DEBUG_API_REQUESTS`` (it prints addresses and API keys).
"""

from __future__ import annotations

import os
import pkgutil
import time
from collections.abc import Callable, Mapping
from typing import Any

from mailer.mail.transports.django_backend import DjangoTransport

#: The environment variables' prefix, Anymail's own.
PREFIX = "ANYMAIL_"
#: Modules of ``anymail.backends`` that are no ESP one can send through from a worker.
NOT_ESPS = frozenset({"base", "base_requests", "test", "console"})
#: Anymail's settings that are not an ESP's, read by every backend.
COMMON = frozenset(
    {"IGNORE_RECIPIENT_STATUS", "IGNORE_UNSUPPORTED_FEATURES", "REQUESTS_TIMEOUT", "IDNA_ENCODER"}
)
_INSTALL = "pip install 'celery-mailguard[anymail]'"


class AnymailTransport(DjangoTransport):
    """Sends through Anymail's backend for ``esp`` (``postmark``: a module of
    ``anymail.backends``), configured from ``environ``'s ``ANYMAIL_*`` variables (default: the
    process's environment). ``max_attempts`` tries of what is worth an immediate retry;
    ``paused_hold`` seconds of sender hold for a paused account (Anymail's SES backend). Raises
    ``ValueError`` in one line at construction (see the module)."""

    def __init__(
        self,
        esp: str,
        *,
        environ: Mapping[str, str] | None = None,
        max_attempts: int = 3,
        paused_hold: float = 900.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.esp = check_esp(esp)
        self._environ = dict(os.environ if environ is None else environ)
        self._settings: dict[str, Any] = {}
        super().__init__(
            f"anymail.backends.{self.esp}.EmailBackend",
            max_attempts=max_attempts,
            paused_hold=paused_hold,
            sleep=sleep,
        )

    def __repr__(self) -> str:
        return f"AnymailTransport({self.esp})"

    def _load(self, backend: str) -> Any:
        """Configure Django if the process has no settings, import the ESP's backend, and open
        it once to find a missing setting now rather than at the first mail."""
        from anymail.exceptions import AnymailConfigurationError  # noqa: PLC0415
        from django.utils.module_loading import import_string  # noqa: PLC0415

        every = anymail_settings(self._environ)
        debug = every.get("DEBUG_API_REQUESTS", False)
        if debug is not False and str(debug).strip().lower() not in ("", "0", "no", "off"):
            raise ValueError(
                f"{PREFIX}DEBUG_API_REQUESTS prints recipient addresses and API keys: unset it"
            )
        _configure_django(backend, every)
        try:
            backend_class = import_string(backend)
        except ImportError as exc:  # the ESP's own package missing (boto3 for amazon_ses)
            raise ValueError(
                f"MAILGUARD_ANYMAIL_ESP={self.esp}: {' '.join(str(exc).split())}"
            ) from None
        self._settings = esp_options(every, str(backend_class.esp_name))
        try:
            backend_class(fail_silently=False, **self._options())
        except AnymailConfigurationError as exc:
            raise ValueError(_missing(exc, self.esp)) from None
        return backend_class

    def _options(self) -> dict[str, Any]:
        return dict(self._settings)


def shipped_esps() -> tuple[str, ...]:
    """The ESPs this Anymail ships (the modules of ``anymail.backends``), sorted;
    ``ValueError`` naming the extra to install when Anymail is not installed."""
    try:
        from anymail import backends  # noqa: PLC0415 - optional
    except ImportError:
        raise ValueError(f"the anymail transport needs Anymail: {_INSTALL}") from None
    found = {module.name for module in pkgutil.iter_modules(backends.__path__)}
    return tuple(sorted(found - NOT_ESPS))


def check_esp(esp: str) -> str:
    """``esp`` (stripped, lower case) if Anymail ships it; ``ValueError`` listing those it
    ships otherwise."""
    name = esp.strip().lower()
    shipped = shipped_esps()
    if name not in shipped:
        given = f"got {esp!r:.40}" if esp.strip() else "it is not set"
        raise ValueError(f"MAILGUARD_ANYMAIL_ESP must be one of {', '.join(shipped)}; {given}")
    return name


def anymail_settings(environ: Mapping[str, str]) -> dict[str, Any]:
    """Every ``ANYMAIL_<NAME>`` variable of ``environ`` as ``{NAME: value}`` (the ``ANYMAIL``
    setting's keys), values converted: ``true`` / ``false`` to booleans, ``REQUESTS_TIMEOUT``
    to seconds (``ValueError`` naming it when it is not a number)."""
    found: dict[str, Any] = {}
    for variable, value in environ.items():
        if not variable.startswith(PREFIX) or variable == PREFIX:
            continue
        name = variable[len(PREFIX) :]
        if value.strip().lower() in ("true", "false"):
            found[name] = value.strip().lower() == "true"
        elif name == "REQUESTS_TIMEOUT":
            try:
                found[name] = float(value)
            except ValueError:
                raise ValueError(f"{variable} must be seconds, got {value!r:.20}") from None
        else:
            found[name] = value
    return found


def esp_options(every: Mapping[str, Any], esp_name: str) -> dict[str, Any]:
    """The backend's keyword arguments from the ``ANYMAIL`` settings ``every``: the ESP's own
    (``POSTMARK_SERVER_TOKEN`` gives ``server_token``; ``esp_name`` as Anymail writes it,
    ``Postmark``, ``Amazon SES``) and the common ones (``IGNORE_RECIPIENT_STATUS``)."""
    prefix = esp_name.upper().replace(" ", "_") + "_"
    options = {k[len(prefix) :].lower(): v for k, v in every.items() if k.startswith(prefix)}
    options.update({k.lower(): v for k, v in every.items() if k in COMMON})
    return options


def _configure_django(backend: str, every: Mapping[str, Any]) -> None:
    """Django's settings for Anymail when the process has none, and Django set up."""
    try:
        import django  # noqa: PLC0415 - optional
        from django.apps import apps  # noqa: PLC0415
        from django.conf import settings  # noqa: PLC0415
    except ImportError:
        raise ValueError(f"the anymail transport needs Django and Anymail: {_INSTALL}") from None
    project = os.environ.get("DJANGO_SETTINGS_MODULE")
    if not settings.configured and not project:
        settings.configure(
            EMAIL_BACKEND=backend,
            ANYMAIL=dict(every),
            TIME_ZONE="UTC",
            USE_TZ=True,
            LOGGING_CONFIG=None,  # the worker's logging stays as the worker set it
        )
    try:
        if not apps.ready:
            django.setup()
    except Exception as exc:  # the project's settings module fails to import or to set up
        raise ValueError(
            f"DJANGO_SETTINGS_MODULE={project}: Django does not set up: {type(exc).__name__}: "
            f"{' '.join(str(exc).split())}"
        ) from None


def _missing(exc: Exception, esp: str) -> str:
    """The one line for a setting Anymail says is missing: the variable to set."""
    text = str(exc)
    start = text.find(PREFIX)
    if start >= 0:
        name = text[start:].split(maxsplit=1)[0].strip(".,'\"")
        return f"{name} must be set with MAILGUARD_ANYMAIL_ESP={esp}"
    return f"MAILGUARD_ANYMAIL_ESP={esp}: {' '.join(text.split())}"
