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

from mailer.errors import InvalidMessage
from mailer.mail.arguments import InvalidArguments, check_arguments
from mailer.mail.kinds import Kinds, check_templates
from mailer.mail.seal import unseal
from workers import state

#: Keyword arguments only mailguard itself passes: ``_progress`` (sealed: see
#: :mod:`mailer.mail.seal`) and ``_requested_at``, the epoch seconds of ``send_mail.delay`` (a
#: kind's ``max_wait`` counts from it; the guard never lets it be later than the mail's first run,
#: so a forged value can only shorten the mail's own deadline).
PRIVATE = ("_progress", "_requested_at")


def check_call(args: Any, kwargs: Any) -> dict[str, Any]:
    """``send_mail``'s call as keywords, or ``InvalidArguments`` (one line) saying what is wrong.

    Run at enqueue (:meth:`workers.tasks.GuardedTask.apply_async`) and again on receipt, before
    the pool (:class:`workers.request.GuardedRequest`): bounds from :mod:`mailer.mail.arguments`,
    a known kind whose templates find their variables in ``context``, a ``_progress`` that
    mailguard sealed for this mail id, and nothing a worker could not decode. Raises
    ``ValueError`` with the environment's problem when its settings are unusable.
    """
    refusal = state.refusal()
    if refusal:
        raise ValueError(refusal)
    settings = state.current()
    call = check_arguments(
        args, kwargs, max_message_bytes=settings.max_message_bytes, private=PRIVATE
    )
    if "_progress" in call:
        mail_id = call.get("mail_id")
        if (
            not isinstance(mail_id, str)
            or unseal(call["_progress"], mail_id, settings.secret) is None
        ):
            raise InvalidArguments("send_mail: _progress is private to mailguard")
    requested = call.get("_requested_at")
    if requested is not None and (
        isinstance(requested, bool)
        or not isinstance(requested, (int, float))
        or not 0 <= requested < 1e11
    ):
        raise InvalidArguments("send_mail: _requested_at is private to mailguard")
    _check_kind(call, settings.kinds)
    _check_transportable(args, kwargs)
    return call


def _check_kind(call: dict[str, Any], kinds: Kinds) -> None:
    """The kind is one of the settings' (``MAILGUARD_KIND_*`` and the built-ins), and every
    text the call leaves out has a template whose variables the context gives."""
    try:
        kind = kinds[call.get("kind", "default")]
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
