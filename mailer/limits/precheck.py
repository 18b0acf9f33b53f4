"""Pre-check for web apps: answer 429 with ``Retry-After`` before enqueueing a mail.

A form that sends a login code can tell the user "try again in 42 s" at once, instead of
enqueueing a mail the worker would refuse or hold back. The answer comes from
:meth:`mailer.Limiter.peek`, which consumes nothing: only the worker's ``acquire`` spends the
recipient's budget, so a pre-check never costs a mail.

Build the limiter exactly as the workers do, so that it reads the same Redis, policy and secret::

    from mailer.factory import build_limiter
    from mailer.limits.precheck import precheck
    from mailer.settings import Settings

    limiter = build_limiter(Settings.from_env())   # once per process

    status, headers = precheck(limiter, "ada@example.com")
    if status == 200:
        send_mail.delay("ada@example.com", kind="code", context={"code": code})

The README shows it in a FastAPI and a Django view. A pre-check is advice, not a lock: two requests
can both pass it, and the worker's guard still decides (it books the later one, or drops it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mailer.errors import InvalidAddress
from mailer.limits.checks import MAX_WAIT
from mailer.limits.decision import Decision
from mailer.limits.limiter import Limiter
from mailer.mail.address import DEFAULT_RULES, AddressRules, normalise_address

if TYPE_CHECKING:
    from mailer.limits.aio import AsyncLimiter

OK = 200
BAD_REQUEST = 400
TOO_MANY_REQUESTS = 429


def precheck(
    limiter: Limiter,
    address: str,
    *,
    max_wait: float = 0.0,
    rules: AddressRules = DEFAULT_RULES,
    tenant: str | None = None,
) -> tuple[int, dict[str, str]]:
    """May a mail to ``address`` be enqueued now? Returns ``(status, headers)`` for an HTTP reply.

    - ``(200, {})``: the limiter would admit a mail now (or, with ``max_wait`` > 0, within
      ``max_wait`` seconds: the worker would book that slot and send it then).
    - ``(429, {"Retry-After": "N"})``: it would not; ``N`` is whole seconds, rounded up, after
      which it would (if nothing else is sent to the recipient meanwhile).
    - ``(400, {})``: ``address`` is not a usable address (the worker would drop the mail).

    The budget is the recipient's limit key, as in the worker: ``Ada+news@Example.com`` and
    ``ada@example.com`` share one. Pass the worker's ``rules`` if it uses non-default ones.
    Under a scoped policy every scope answers (domain, sender, and ``tenant``'s when given, as
    for ``send_mail.delay(..., tenant=...)``). Consumes nothing. Raises
    :class:`mailer.BackendUnavailable` when the limiter's Redis cannot be reached: the app
    chooses to answer 503, or to enqueue anyway and let the worker's guard decide.
    """
    key = _limit_key(address, max_wait, rules)
    if key is None:
        return BAD_REQUEST, {}
    return _answer(limiter.peek(key, tenant=tenant), max_wait)


async def aprecheck(
    limiter: AsyncLimiter,
    address: str,
    *,
    max_wait: float = 0.0,
    rules: AddressRules = DEFAULT_RULES,
    tenant: str | None = None,
) -> tuple[int, dict[str, str]]:
    """:func:`precheck` for asyncio apps, on a :class:`mailer.limits.aio.AsyncLimiter` (one awaited
    round trip; the same answers and the same budget as the workers')."""
    key = _limit_key(address, max_wait, rules)
    if key is None:
        return BAD_REQUEST, {}
    return _answer(await limiter.peek(key, tenant=tenant), max_wait)


def _limit_key(address: str, max_wait: float, rules: AddressRules) -> str | None:
    """The recipient's limit key, or None for an address the worker would drop."""
    if not 0 <= max_wait <= MAX_WAIT:  # also refuses NaN
        raise ValueError(f"max_wait must be between 0 and {MAX_WAIT:.0f} seconds, got {max_wait}")
    try:
        return normalise_address(address, rules).limit_key
    except InvalidAddress:
        return None


def _answer(decision: Decision, max_wait: float) -> tuple[int, dict[str, str]]:
    if decision.allowed or decision.wait_ms <= int(max_wait * 1000):  # as acquire books
        return OK, {}
    seconds = -(-decision.wait_ms // 1000)  # whole seconds, rounded up
    return TOO_MANY_REQUESTS, {"Retry-After": str(max(1, seconds))}
