"""The bound of ``send_mail.delay`` when the broker or the result backend is down.

Left to itself, Celery retries a publish to a broker that is down, and the result backend's
subscription to a task's result (Redis: made before the publish), 20 times a second apart, then
raises ``RuntimeError: Retry limit exceeded ...``. A caller's call here tries for
``MAILGUARD_ENQUEUE_TIMEOUT`` seconds at most (:func:`bounded`), then raises one
:class:`~mailer.errors.NotEnqueued` that names what is unreachable (:func:`unreachable`).

Nothing of such a call sends later: the result backend's subscription fails before anything is
published, and a publish that fails removes the mail's outbox entry
(:func:`workers.outbox.entries.discard`). A caller's own ``retry_policy`` (or a Redis result
backend's
``result_backend_transport_options['retry_policy']``) is kept as given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import redis.exceptions
from kombu.exceptions import OperationalError

from mailer.errors import NotEnqueued
from workers.process import settings as process_settings

#: Seconds between two tries (the first at once).
INTERVAL = 0.5
#: How Celery's result backend says its subscription gave up.
_BACKEND_GAVE_UP = "result store"


def policy(timeout: float) -> dict[str, Any]:
    """A retry policy (kombu's ``retry_policy`` keys) that tries for about ``timeout`` s."""
    return {
        "max_retries": max(int(timeout / INTERVAL), 1),
        "interval_start": 0,
        "interval_step": INTERVAL,
        "interval_max": INTERVAL,
    }


@contextlib.contextmanager
def bounded(app: Any, options: dict[str, Any]) -> Iterator[None]:
    """Around a caller's publish through ``app``: bound it (``options``: ``apply_async``'s,
    changed in place) and ``app``'s Redis result backend to ``MAILGUARD_ENQUEUE_TIMEOUT``;
    raise :class:`~mailer.errors.NotEnqueued` for a server out of reach."""
    timeout = process_settings.current().enqueue_timeout
    options.setdefault("retry_policy", policy(timeout))
    # Celery's Redis backend reads its retry policy from this dict (its transport options).
    transport = getattr(app.backend, "_transport_options", None)
    if isinstance(transport, dict) and "retry_policy" not in transport:
        transport["retry_policy"] = policy(timeout) | {"timeout": timeout}
    try:
        yield
    except Exception as exc:
        error = unreachable(app, exc)
        if error is None or error is exc:
            raise
        raise error from exc


def unreachable(app: Any, error: BaseException) -> NotEnqueued | None:
    """The :class:`~mailer.errors.NotEnqueued` that ``error`` (raised by ``apply_async``
    through ``app``) means, or None when it is not a server out of reach."""
    if isinstance(error, NotEnqueued):
        return error
    if isinstance(error, RuntimeError) and _BACKEND_GAVE_UP in str(error):
        # Its text ("... must be restarted") is not true of mailguard's calls: left out.
        return NotEnqueued("result backend", str(app.conf.result_backend))
    if isinstance(error, OperationalError):
        return NotEnqueued("broker", str(app.conf.broker_url), error)
    if isinstance(error, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
        return NotEnqueued("result backend", str(app.conf.result_backend), error)
    return None
