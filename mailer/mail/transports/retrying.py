"""Short retries within one send: what is worth another try at once (:func:`worth_retrying`,
the rule every transport follows), and the loop of the API transports (SES, a Django backend):
only what may work on a second try at once (``RETRY``: a network error, a provider's 5xx, an
unknown answer), never a hold (throttling is the guard's to answer) and never a permanent
refusal."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from mailer.errors import SendError, TransientSendError
from mailer.mail.replies import Action, reaction_of
from mailer.mail.transports.base import SendReceipt

log = logging.getLogger(__name__)


def send_with_retries(
    attempt: Callable[[], SendReceipt],
    *,
    max_attempts: int,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
    wait_max: float = 10.0,
) -> SendReceipt:
    """``attempt()`` up to ``max_attempts`` times (random exponential waits of at most
    ``wait_max`` seconds) while it raises a transient error whose reaction is ``RETRY``; the
    receipt counts the tries, an error carries them in ``attempts``. ``what`` names the send in
    log lines (a Message-ID, never an address)."""
    tries = 0

    def once() -> SendReceipt:
        nonlocal tries
        tries += 1
        try:
            receipt = attempt()
        except SendError as exc:
            exc.attempts = tries
            raise
        return replace(receipt, attempts=tries)

    retrying = Retrying(
        stop=stop_after_attempt(max_attempts),
        wait=wait_random_exponential(multiplier=0.5, max=wait_max),
        retry=retry_if_exception(worth_retrying),
        sleep=sleep,
        reraise=True,
        before_sleep=lambda state: log.warning(
            "send of %s failed on attempt %d (%s); retrying",
            what,
            state.attempt_number,
            state.outcome.exception() if state.outcome else None,
        ),
    )
    return retrying(once)


def worth_retrying(exc: BaseException, *, retry_holds: bool = False) -> bool:
    """True when ``exc`` is worth another try at once: a transient error whose reaction is
    ``RETRY`` (no reply, or one that asks for no delay); with ``retry_holds`` (no guard holds
    the sender: the SMTP transport without holds) every transient error. Never a permanent
    one."""
    if not isinstance(exc, TransientSendError):
        return False
    return retry_holds or reaction_of(exc).action is Action.RETRY
