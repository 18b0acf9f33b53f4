"""What several ``mailguard`` commands share: the environment's settings, refused as a worker
would refuse them, and the shared stores (limiter, ledger) they read.

Every refusal is one line through :func:`workers.cli.errors.fail`: exit 2 for bad settings or
input, 1 for a store no command can see (a ``memory://`` URL belongs to one worker process).
"""

from __future__ import annotations

from mailer import Limiter, normalise_address
from mailer.errors import BackendUnavailable, InvalidAddress
from mailer.factory import build_policies, build_providers
from mailer.settings import Settings
from workers.cli.errors import USAGE, fail


def env_settings() -> Settings:
    """The ``MAILGUARD_*`` settings; a bad variable is one line, exit 2."""
    try:
        return Settings.from_env()
    except ValueError as exc:
        fail(str(exc), USAGE)


def live_settings(settings: Settings) -> Settings:
    """``settings`` with the live policy in force (``mailguard policy set``), as the workers
    decide by it; ``settings`` themselves when none is stored, the ledger is ``memory://``, its
    Redis is down or the stored version does not read (the workers keep their last good one)."""
    if settings.effective_ledger_url.startswith("memory:"):
        return settings
    try:
        live = build_policies(settings).current()
        return settings if live is None else live.apply(settings)
    except (BackendUnavailable, ValueError):
        return settings


def refuse_problems(settings: Settings) -> None:
    """Refuse what a worker would refuse at start (one line, exit 2): shared storage needs it."""
    for problem in settings.problems():
        fail(problem, USAGE)


def shared_ledger_settings(what: str) -> Settings:
    """The environment's settings for a command that reads what the workers keep beside the
    ledger (``what``: their schedule, their suppression list); exit 2 on bad settings, 1 on a
    memory ledger, which only its own worker can see."""
    settings = env_settings()
    refuse_problems(settings)
    if settings.effective_ledger_url.startswith("memory:"):
        fail(
            f"the ledger is memory://: each worker keeps its own {what}, which this command "
            "cannot see; set the workers' shared redis:// MAILGUARD_LEDGER_URL"
        )
    return settings


def shared_limiter_url(settings: Settings) -> None:
    """Refuse (exit 2, or 1 for memory://) settings under which no shared limiter can be read."""
    refuse_problems(settings)
    if settings.limiter_url.startswith("memory:"):
        fail(
            "MAILGUARD_LIMITER_URL is memory://: each worker process keeps its own counts, "
            "which this command cannot see; set the workers' shared redis:// limiter URL"
        )


def shared_limiter(settings: Settings) -> Limiter:
    """The workers' shared limiter for the configured policy (close it after use); with the
    workers' finder of each mail's provider for a policy with provider tiers."""
    shared_limiter_url(settings)
    try:
        limiter = Limiter.from_url(
            settings.limiter_url, settings.policy, secret=settings.secret, tz=settings.timezone
        )
    except ValueError as exc:
        fail(f"MAILGUARD_LIMITER_URL: {exc}", USAGE)
    if settings.policy.provider_scoped:  # each mail's provider, as the workers find it
        limiter.providers = build_providers(settings, limiter)
    return limiter


def recipient_key(address: str) -> str:
    """The limit key of ``address``, as the worker derives it; a bad address is exit 2."""
    try:
        return normalise_address(address).limit_key
    except InvalidAddress as exc:
        fail(f"bad address: {exc}", USAGE)
