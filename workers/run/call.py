"""``send_mail``'s call, checked: at enqueue and again on receipt, before a worker's pool.

:func:`check_call` bounds the arguments and checks every address (:mod:`mailer.mail.arguments`),
checks the kind and the variables its templates need against the settings' kinds, accepts
mailguard's private keywords only as mailguard made them, and refuses what kombu's JSON could
not carry to a worker. Celery-free (kombu's JSON only): the CLI and the receipt check use it as
well.
"""

from __future__ import annotations

from typing import Any

from kombu.utils.json import dumps, loads

from mailer import Kinds
from mailer.errors import InvalidMessage, MailguardError
from mailer.mail import InvalidArguments, check_arguments, check_templates, unseal
from workers.process import settings as process_settings
from workers.process.per_process import PerProcess

#: Keyword arguments only mailguard itself passes: ``_progress`` (sealed: see
#: :mod:`mailer.mail.seal`), ``_requested_at``, the epoch seconds of ``send_mail.delay`` (a
#: kind's ``max_wait`` counts from it; the guard never lets it be later than the mail's first run,
#: so a forged value can only shorten the mail's own deadline) and ``_order``, the epoch
#: microseconds of that call, strictly increasing in its process (:mod:`workers.run.stamps`: the
#: mail's place in its recipient's booked order, :mod:`mailer.limits.ordering`; a forged value
#: moves only this mail within its own recipient's bookings, never past the policy).
PRIVATE = ("_progress", "_requested_at", "_order")
#: The bound of ``_order`` (epoch microseconds: below year 5138).
_ORDER_BOUND = 10**17
#: The counters of the unsealed ``_progress`` dict 0.1.0 put in a deferred mail's next run.
_SHIPPED_COUNTERS = frozenset({"attempts", "send_failures", "limiter_failures", "deferrals"})


def shipped_progress(value: Any) -> bool:
    """True for the ``_progress`` of a mail 0.1.0 deferred: a dict of its four counters, each an
    int in [0, 10**6]. Its counters are not trusted (nothing sealed them): such a run starts
    on a fresh progress, its mail kept until its kind's lifetime like any other."""
    return (
        isinstance(value, dict)
        and set(value) <= _SHIPPED_COUNTERS
        and all(type(n) is int and 0 <= n <= 10**6 for n in value.values())
    )


#: The workers running in this process, by id: a ``memory://`` broker lives inside one process,
#: so a mail enqueued on it is read only if a worker of that same process consumes it.
_local_workers: PerProcess[int, bool] = PerProcess()


class NoConsumer(MailguardError, RuntimeError):
    """The broker is in-process (``memory://``) and no worker of this process consumes it."""


def worker_started(worker: object) -> None:
    """Note that ``worker`` now runs in this process (:mod:`workers.tasks`, on ``worker_init``)."""
    _local_workers.put(id(worker), True)


def worker_stopped(worker: object) -> None:
    """Note that ``worker`` stopped (on ``worker_shutdown``; a second stop is harmless)."""
    _local_workers.discard(id(worker))


def check_consumed(broker_url: Any, setting: str = "MAILGUARD_BROKER_URL") -> None:
    """Refuse (:class:`NoConsumer`, one line naming ``setting``) to enqueue on a ``memory://``
    broker that no worker of this process consumes: the mail would stay PENDING for ever."""
    if not str(broker_url or "").startswith("memory:"):
        return
    if any(_local_workers.values()):
        return
    raise NoConsumer(
        f"mailguard: {setting} is memory://, a broker inside this process that no worker here "
        "consumes, so the mail would never be sent; set it to the workers' broker "
        "(e.g. redis://localhost:6379/0) or run a worker in this process "
        "(workers.brokers.inprocess.inprocess_worker)"
    )


def check_call(args: Any, kwargs: Any, *, addresses: bool = True) -> dict[str, Any]:
    """``send_mail``'s call as keywords, or ``InvalidArguments`` (one line) saying what is wrong.

    Run at enqueue (:meth:`workers.tasks.GuardedTask.apply_async`) and again on receipt, before
    the pool (:class:`workers.run.request.GuardedRequest`): bounds from
    :mod:`mailer.mail.arguments`, a known kind whose templates find their variables in ``context``,
    a ``_progress`` that mailguard sealed for this mail id, and nothing a worker could not decode.
    Raises
    ``ValueError`` with the environment's problem when its settings are unusable.
    ``addresses`` False: addresses bounded, not parsed (on receipt: the guard parses them in
    the pool, and records a bad one ``dropped`` / ``invalid``).
    """
    refusal = process_settings.refusal()
    if refusal:
        raise ValueError(refusal)
    settings = process_settings.current()
    call = check_arguments(
        args,
        kwargs,
        max_message_bytes=settings.max_message_bytes,
        private=PRIVATE,
        addresses=addresses,
        rules=settings.address_rules,
    )
    if "_progress" in call:
        mail_id = call.get("mail_id")
        if not isinstance(mail_id, str) or (
            not shipped_progress(call["_progress"])
            and unseal(call["_progress"], mail_id, settings.secret) is None
        ):
            raise InvalidArguments("send_mail: _progress is private to mailguard")
    requested = call.get("_requested_at")
    if requested is not None and (
        isinstance(requested, bool)
        or not isinstance(requested, (int, float))
        or not 0 <= requested < 1e11
    ):
        raise InvalidArguments("send_mail: _requested_at is private to mailguard")
    order = call.get("_order")
    if order is not None and (
        isinstance(order, bool) or not isinstance(order, int) or not 0 < order < _ORDER_BOUND
    ):
        raise InvalidArguments("send_mail: _order is private to mailguard")
    _check_kind(call, settings.kinds)
    _check_transportable(args, kwargs)
    return call


def _check_kind(call: dict[str, Any], kinds: Kinds) -> None:
    """The kind is one of the settings' (``MAILGUARD_KIND_*`` and the built-ins), and every
    text the call leaves out has a template whose variables the context gives."""
    try:
        kind = kinds[call.get("kind", "default")]
        if call.get("mime") is not None:
            return  # a carried message renders nothing
        check_templates(
            kind, call.get("subject"), call.get("body"), call.get("html"), call.get("context")
        )
    except InvalidMessage as exc:
        raise InvalidArguments(f"send_mail: {exc}") from None


def _check_transportable(args: Any, kwargs: Any) -> None:
    """Refuse at enqueue what a worker could not decode (it would stay PENDING forever).

    kombu's JSON reads ``{"__type__": ..., "__value__": ...}`` as a typed value; a caller's
    context shaped like that encodes fine but fails to decode on the worker.
    """
    try:
        loads(dumps([args, kwargs]))
    except (TypeError, ValueError) as exc:
        raise InvalidArguments(
            f"send_mail arguments cannot travel as JSON: {type(exc).__name__}; use plain "
            "str/int/float/bool/None, lists and dicts with str keys"
        ) from None
