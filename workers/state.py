"""What one worker process holds: the environment's settings, the settings in force, its guard.

The guard follows the live policy (:mod:`mailer.records.policy`): :func:`guard` reads its
version at most once a second and, for a new one, hands out a guard built for it (a run in
progress finishes under the guard it started with).

``workers.app``, ``workers.tasks``, ``workers.promoter`` and ``workers.request`` read the process
state here and nowhere else. Read the settings in force with :func:`current` (``use_settings``
replaces them), never by copying :data:`settings` into another module at import.

Celery-free: it only builds the guard, from :mod:`mailer.factory`.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from mailer.errors import BackendUnavailable
from mailer.factory import build_guard, build_policies, rebuild_guard
from mailer.guard import Guard
from mailer.records.policy import LivePolicy, PolicyWatch
from mailer.settings import Settings

#: The name ``send_mail`` is registered and published under (the promoter publishes by it).
SEND_MAIL = "mailguard.send_mail"

try:
    env_settings = Settings.from_env()
    #: Why the environment's settings are unusable (one line naming the variable), or None.
    #: A worker refuses to start with it and ``send_mail.delay`` raises it; importing never
    #: raises (the process then runs on embedded defaults).
    settings_error: str | None = None
except ValueError as _exc:
    env_settings, settings_error = Settings(), str(_exc)

#: The settings this process's guard is built from: the environment's, or :func:`use_settings`'s.
settings: Settings = env_settings

_guard: _Following | None = None
_guard_pid = 0
_lock = threading.Lock()


def current() -> Settings:
    """The settings in force in this process (read at each call: ``use_settings`` changes them)."""
    return settings


def refusal() -> str | None:
    """Why ``send_mail`` must refuse every call: the environment's settings are unusable and no
    :func:`use_settings` replaced them (one line naming the variable); else None."""
    if settings_error and settings is env_settings:
        return f"mailguard: {settings_error}"
    return None


def guard() -> Guard:
    """This process's guard, built on first use (so after the prefork pool forked: a guard built
    before the fork would share its connections with every pool process)."""
    global _guard, _guard_pid
    with _lock:
        if _guard is None or _guard_pid != os.getpid():
            _guard, _guard_pid = _Following(build_guard(settings), settings), os.getpid()
        return _guard.current()


class _Following:
    """A guard that follows the live policy in the ledger's Redis (none on a memory ledger:
    no other process can set one there). Call under :data:`_lock`."""

    def __init__(self, base: Guard, env: Settings) -> None:
        self.guard = base
        self.watch: PolicyWatch[Guard] | None = None
        if not env.effective_ledger_url.startswith("memory:"):

            def build(live: LivePolicy | None) -> Guard:
                return rebuild_guard(base, env if live is None else live.apply(env))

            self.watch = PolicyWatch(build_policies(env, base.ledger), build)

    def current(self) -> Guard:
        """The guard for the version in force (the version read at most once a second)."""
        if self.watch is not None:
            self.guard = self.watch.check() or self.guard
        return self.guard


def limiter_now() -> float:
    """Epoch seconds on the limiter's clock (the Redis server's, estimated without a round trip
    per call: :meth:`mailer.Limiter.now`); this process's clock while the limiter was never
    reached. Every ``eta`` mailguard publishes is on this clock."""
    try:
        return guard().limiter.now()
    except BackendUnavailable:
        return time.time()


def clock_offset() -> float:
    """Seconds this process's clock is behind the limiter's (negative: ahead): what a received
    ``eta`` (on the limiter's clock) is shifted by before this worker's Celery schedules it."""
    try:
        return guard().limiter.now() - time.time()
    except BackendUnavailable as exc:
        logging.getLogger("mailguard").warning("clock offset unknown (%s): none applied", exc)
        return 0.0


def use_settings(new: Settings) -> Settings:
    """Build this process's guard from ``new`` from now on; return the settings it replaces.

    For a process that runs its own in-process worker on settings of its own rather than the
    environment's (``mailguard demo``). Only the guard changes: the cached guard is dropped and
    the next run builds one from ``new``. ``workers.app.settings`` stays what the environment
    says, and the Celery app keeps its configuration: a caller that also needs another broker or
    result backend configures ``workers.app.app.conf`` itself before starting its worker (see
    :func:`workers.demo.configure`). Call it before the worker starts, not while mails run.
    """
    global settings, _guard
    with _lock:
        old, settings, _guard = settings, new, None
    return old
