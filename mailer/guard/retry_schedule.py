"""When a mail the relay refused for a time is tried again, and when it is no longer kept.

A mail is kept through temporary failures (4xx replies, greylisting, refused or dropped
connections, timeouts, a relay down) until its kind's lifetime has passed since the guard first
saw it (:func:`mailer.mail.kinds.lifetime_of`, counted from ``Progress.first_seen`` on the
limiter's clock). Its tries back off per mail:

- after a refused send or a lost link (:func:`retry_wait`): ``retry_backoff`` doubling up to
  ``retry_backoff_max`` (30 s, 1 min, 2 min, ... 4000 s with the defaults; Postfix's
  ``minimal_backoff_time`` 300 s and ``maximal_backoff_time`` 4000 s, postconf(5));
- after a greylisting reply that states no delay (:func:`greylist_wait`): ``greylist_delay``
  times 1, 5, 10, 20, 40, then doubling, up to ``retry_backoff_max``.

:func:`next_try` fits a wait into the lifetime: a try that would fall past it becomes one last
try just before it, unless that is closer than ``min_gap`` to this one; then the mail is done
(:func:`expired`: ``dropped`` / ``expired`` with the last reply it got). Pure, no I/O;
durations in seconds, moments in epoch seconds on the limiter's clock.
"""

from __future__ import annotations

from mailer import defaults
from mailer import outcomes as why
from mailer.durations import human
from mailer.errors import TransientSendError
from mailer.guard.data import GuardConfig, iso
from mailer.mail.kinds import Kind, lifetime_of
from mailer.outcomes import Outcome
from mailer.steps import Finish, Progress

#: How far before the end of its lifetime a mail's last try is set (seconds): room for a run
#: that starts a little late to be tried rather than expire unseen.
LAST_TRY_MARGIN = 5.0


def retry_wait(config: GuardConfig, failures: int) -> float:
    """The wait after a mail's ``failures``-th (>= 1) refused run: doubling from
    ``retry_backoff``, at most ``retry_backoff_max``."""
    return defaults.backoff(failures, first=config.retry_backoff, cap=config.retry_backoff_max)


def greylist_wait(config: GuardConfig, replies: int) -> float:
    """The wait after a mail's ``replies``-th (>= 1) greylisting reply that states no delay:
    ``greylist_delay`` times :data:`~mailer.defaults.GREYLIST_STEPS`, then doubling, at most
    ``retry_backoff_max`` (never less than ``greylist_delay``)."""
    steps = defaults.GREYLIST_STEPS
    index = max(replies, 1) - 1
    if index < len(steps):
        factor = steps[index]
    else:
        factor = steps[-1] * 2.0 ** min(index - len(steps) + 1, 64)
    return max(min(config.greylist_delay * factor, config.retry_backoff_max), config.greylist_delay)


def tried(progress: Progress) -> bool:
    """Whether the relay was tried for this mail already: its lifetime, not its ``max_wait``,
    bounds it from then on."""
    return bool(progress.attempts or progress.send_failures or progress.greylists)


def kept_for(kind: Kind, progress: Progress, config: GuardConfig) -> float:
    """How long after ``first_seen`` the mail may still go, in seconds: its kind's
    ``max_wait`` before its first try, its kind's lifetime once the relay was tried."""
    if tried(progress):
        return lifetime_of(kind, config.lifetime)
    return kind.max_wait


def next_try(
    config: GuardConfig,
    kind: Kind | None,
    progress: Progress,
    now: float,
    wait: float,
    *,
    min_gap: float,
) -> float | None:
    """``wait`` when the try after it is within the mail's lifetime; else the wait to one
    last try :data:`LAST_TRY_MARGIN` before the lifetime ends, when that is at least
    ``min_gap`` away; else None (the mail has no try left: :func:`expired`)."""
    lifetime = config.lifetime if kind is None else lifetime_of(kind, config.lifetime)
    end = (progress.first_seen or now) + lifetime
    if now + wait <= end - LAST_TRY_MARGIN:
        return wait
    last = end - min(LAST_TRY_MARGIN, lifetime / 2) - now
    if last >= min_gap:
        return last
    return None


def expired(
    base: Outcome,
    progress: Progress,
    exc: TransientSendError,
    *,
    kind: Kind | None,
    config: GuardConfig,
    now: float,
) -> Finish:
    """``dropped`` / ``expired``: the relay refused the mail for a time and no try is left
    within its kind's lifetime; the outcome carries the reply (``exc``)."""
    lifetime = config.lifetime if kind is None else lifetime_of(kind, config.lifetime)
    name = base.kind if kind is None else kind.name
    seen = progress.first_seen or now
    return Finish(
        base.but(
            status="dropped",
            reason=why.EXPIRED,
            attempts=progress.attempts,
            smtp_code=exc.code,
            smtp_reply=exc.reply,
            provider=exc.provider,
            wait=None,
            detail=f"refused for a time ({exc.reason}) and no try left within kind {name!r}'s "
            f"lifetime of {human(lifetime)} since {iso(seen)}",
        )
    )
