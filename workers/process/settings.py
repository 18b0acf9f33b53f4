"""The settings of one worker process: the environment's, read once at import, and the settings
in force (the environment's, or those :func:`use_settings` gave).

Read the settings in force with :func:`current` at each use, never by copying :data:`settings`
into another module at import: ``use_settings`` replaces them, and the guard
(:func:`workers.run.state.guard`) is dropped then and built from the new ones at its next use.

Celery-free: it only reads :class:`mailer.settings.Settings`.
"""

from __future__ import annotations

from collections.abc import Callable

from mailer.settings import Settings

try:
    env_settings = Settings.from_env()
    #: Why the environment's settings are unusable (one line naming the variable), or None.
    #: A worker refuses to start with it and ``send_mail.delay`` raises it; importing never
    #: raises (the process then runs on embedded defaults).
    settings_error: str | None = None
except ValueError as _exc:
    env_settings, settings_error = Settings(), str(_exc)

#: The settings in force: the environment's, or :func:`use_settings`'s.
settings: Settings = env_settings
#: What :func:`use_settings` calls once it put other settings in force (:func:`when_replaced`).
_listeners: list[Callable[[], None]] = []


def current() -> Settings:
    """The settings in force in this process (read at each call: ``use_settings`` changes them)."""
    return settings


def refusal() -> str | None:
    """Why ``send_mail`` must refuse every call: the environment's settings are unusable and no
    :func:`use_settings` replaced them (one line naming the variable); else None."""
    if settings_error and settings is env_settings:
        return f"mailguard: {settings_error}"
    return None


def use_settings(new: Settings) -> Settings:
    """Put ``new`` in force from now on; return the settings it replaces.

    For a process that runs its own in-process worker on settings of its own rather than the
    environment's (``mailguard demo``). Only the guard changes: the cached guard is dropped and
    the next run builds one from ``new`` (:func:`workers.run.state.guard`). ``workers.app.settings``
    stays what the environment says, and the Celery app keeps its configuration: a caller that
    also needs another broker or result backend configures ``workers.app.app.conf`` itself before
    starting its worker (see :func:`workers.demo.configure`). Call it before the worker starts,
    not while mails run.
    """
    global settings
    old, settings = settings, new
    for listener in _listeners:
        listener()
    return old


def when_replaced(listener: Callable[[], None]) -> None:
    """Call ``listener`` each time :func:`use_settings` puts settings in force (the guard of
    :mod:`workers.run.state` is dropped then, and built from them at its next use)."""
    _listeners.append(listener)
