"""What one worker process holds at run time: its guard, and the limiter's clock read through it.

The guard is built from the settings in force (:func:`workers.process.settings.current`) on
first use, and again after ``use_settings`` put others in force (which drops it). It follows
the live policy (:mod:`mailer.records.policy`): :func:`guard` reads its version at most once a
second and, for a new one, hands out a guard built for it (a run in progress finishes under the
guard it started with).

``workers.app``, ``workers.tasks``, ``workers.polling.promoter`` and ``workers.run.request`` read
the guard here and nowhere else.

Celery-free: it only builds the guard, from :mod:`mailer.factory`.
"""

from __future__ import annotations

import logging
import threading
import time

from mailer.errors import BackendUnavailable
from mailer.factory import build_guard, build_policies, rebuild_guard
from mailer.guard import Guard
from mailer.records.policy import LivePolicy, PolicyWatch
from mailer.settings import Settings
from workers.process import settings as process_settings
from workers.process.per_process import PerProcess
from workers.waiting import parking

#: The name ``send_mail`` is registered and published under (the promoter publishes by it).
SEND_MAIL = "mailguard.send_mail"

#: This process's one guard (built after the prefork pool forked: see :func:`guard`).
_guard: PerProcess[str, _Following] = PerProcess()
_lock = threading.Lock()


def guard() -> Guard:
    """This process's guard, built on first use (so after the prefork pool forked: a guard built
    before the fork would share its connections with every pool process)."""
    with _lock:
        return _guard.built("guard", _built).current()


def _built() -> _Following:
    in_force = process_settings.current()
    built = build_guard(in_force)
    parking.recognise_parked(in_force, built.ledger)
    return _Following(built, in_force)


def _drop_guard() -> None:
    """Forget the guard: other settings were put in force (the next run builds one from them)."""
    with _lock:
        _guard.clear()


process_settings.when_replaced(_drop_guard)


class _Following:
    """A guard that follows the live policy in the ledger's Redis (none on a memory ledger:
    no other process can set one there). Call under :data:`_lock`."""

    def __init__(self, base: Guard, env: Settings) -> None:
        self.guard = base
        self.watch: PolicyWatch[Guard] | None = None
        if not env.effective_ledger_url.startswith("memory:"):

            def build(live: LivePolicy | None) -> Guard:
                return rebuild_guard(base, env if live is None else live.apply(env))

            policies = build_policies(env, base.ledger)
            self.watch = PolicyWatch(policies, build, every=env.policy_check)

    def current(self) -> Guard:
        """The guard for the version in force (its version read at most once each
        ``MAILGUARD_POLICY_CHECK``)."""
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
