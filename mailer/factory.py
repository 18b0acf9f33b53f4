"""The one builder of the guard and its parts: from :class:`~mailer.settings.Settings`
(limiter, ledger, suppression list, holds, transport; :func:`build_guard`), or in one process
for tests and tools (:func:`memory_guard`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from mailer.clock import Clock, system_clock
from mailer.guard import Guard, GuardConfig
from mailer.limits.limiter import Limiter
from mailer.mail.kinds import Kinds
from mailer.mail.transports import registry as transports
from mailer.mail.transports.base import Transport
from mailer.metrics import Metrics, default_metrics
from mailer.providers import ProviderFinder, provider_finder
from mailer.records.holds import Holds, holds_from_url
from mailer.records.ledger import Ledger, RedisLedger, ledger_from_url
from mailer.records.outbox import Outbox, outbox_from_url
from mailer.records.policy import LivePolicies, policies_from_url
from mailer.records.reputation import Limits, Reputation, reputation_from_url
from mailer.records.suppression import Suppressions, suppressions_from_url
from mailer.records.warmup import Warmup, warmup_from_url
from mailer.settings import Settings
from mailer.storage import database_beside
from mailer.unsubscribe import Signer, Unsubscribe


def build_limiter(settings: Settings) -> Limiter:
    """The limiter on ``settings.limiter_url`` with the policy, secret and time zone; for a
    policy with provider tiers, with the finder of each mail's provider
    (:func:`build_providers`). Without provider tiers no finder is built: no DNS is asked."""
    with _naming("LIMITER_URL"):
        limiter = Limiter.from_url(
            settings.limiter_url,
            settings.policy,
            secret=settings.secret,
            tz=settings.timezone,
            max_bookings=settings.max_bookings,
        )
    if settings.policy.provider_scoped:
        limiter.providers = build_providers(settings, limiter)
    return limiter


def build_providers(settings: Settings, limiter: Limiter | None = None) -> ProviderFinder:
    """The finder of recipient domains' mailbox providers, asking ``MAILGUARD_DNS_SERVERS``
    within ``MAILGUARD_DNS_TIMEOUT``; its answers kept where the limiter lives (sharing
    ``limiter``'s Redis client, so every worker agrees) and timed on the limiter's clock."""
    with _naming("LIMITER_URL"):
        return provider_finder(
            settings.limiter_url,
            servers=settings.dns_servers,
            timeout=settings.dns_timeout,
            secret=settings.secret,
            clock=None if limiter is None else limiter.now,
            client=None if limiter is None else limiter.client,
        )


def build_guard_limiter(settings: Settings) -> Limiter:
    """The guard's limiter: :func:`build_limiter`'s (every scope of the policy)."""
    return build_limiter(settings)


def build_ledger(settings: Settings, limiter: Limiter | None = None) -> Ledger:
    """The ledger on the ledger URL; shares ``limiter``'s Redis client when the URLs match."""
    url = settings.effective_ledger_url
    client = None if limiter is None or url != settings.limiter_url else limiter.client
    with _naming("LEDGER_URL" if settings.ledger_url else "LIMITER_URL"):
        return ledger_from_url(url, client=client)


def build_suppressions(settings: Settings, ledger: Ledger | None = None) -> Suppressions:
    """The suppression list, where the ledger lives (sharing its Redis client if given)."""
    client = ledger.client if isinstance(ledger, RedisLedger) else None
    return suppressions_from_url(
        settings.effective_ledger_url,
        secret=settings.secret,
        client=client,
        rules=settings.address_rules,
    )


def build_reputation(settings: Settings, ledger: Ledger | None = None) -> Reputation | None:
    """The sender reputation where the ledger lives (``MAILGUARD_REPUTATION``); None: off."""
    if settings.reputation is None:
        return None
    client = ledger.client if isinstance(ledger, RedisLedger) else None
    limits = Limits(settings.reputation, settings.reputation_window, settings.reputation_min)
    return reputation_from_url(
        settings.effective_ledger_url, limits, client=client, default_sender=settings.sender
    )


def build_warmup(settings: Settings, limiter: Limiter | None = None) -> Warmup | None:
    """The warm-up plans (``MAILGUARD_WARMUP``) where the limiter lives, on its clock and its
    Redis client; None: off."""
    if settings.warmup is None:
        return None
    with _naming("LIMITER_URL"):
        return warmup_from_url(
            settings.limiter_url,
            settings.warmup,
            clock=None if limiter is None else limiter.now,
            client=None if limiter is None else limiter.client,
            idle=settings.warmup_idle,
        )


def build_unsubscribe(settings: Settings, suppressions: Suppressions) -> Unsubscribe | None:
    """One-click unsubscribe for the bulk kinds (``MAILGUARD_KIND_<NAME>_UNSUBSCRIBE=1``);
    None without a bulk kind. ``ValueError`` (one line) without the URL or the secret."""
    bulk = frozenset(name for name, kind in settings.kinds.items() if kind.unsubscribe)
    if not bulk and settings.unsubscribe_url is None:
        return None
    for problem in settings.problems():
        if "_UNSUBSCRIBE" in problem:
            raise ValueError(problem)
    url, secret = settings.unsubscribe_url or "", settings.secret or ""
    return Unsubscribe(url, Signer(secret), suppressions, bulk) if url and secret else None


def build_policies(settings: Settings, ledger: Ledger | None = None) -> LivePolicies:
    """The live policy's versions, where the ledger lives (sharing its Redis client if given)."""
    client = ledger.client if isinstance(ledger, RedisLedger) else None
    return policies_from_url(settings.effective_ledger_url, client=client)


def outbox_url(settings: Settings) -> str:
    """Where the outbox of ``settings`` lives: on the ledger's Redis server, in the broker's
    database when the broker is a plain Redis URL to that server as the same user (a first
    message's entry then rides in its publish with no database switch:
    ``workers/outbox/ride.py``), else in the ledger's. A function of the URLs alone, so every
    producer and worker of a deployment finds it in one place."""
    ledger = settings.effective_ledger_url
    return database_beside(ledger, settings.broker_url) or ledger


def build_outbox(settings: Settings, *, client: object = None) -> Outbox:
    """The outbox of ``settings.queue`` at :func:`outbox_url` (``client``: a redis-py client on
    that URL to share, such as the schedule's when it is the ledger's)."""
    with _naming("LEDGER_URL" if settings.ledger_url else "LIMITER_URL"):
        return outbox_from_url(outbox_url(settings), client=client, queue=settings.queue)


def build_holds(
    settings: Settings,
    limiter: Limiter | None = None,
    ledger: Ledger | None = None,
) -> Holds:
    """The holds, where the limiter lives: sharing the limiter's Redis client, or the
    ledger's when both live on one URL (the guard then reads holds and suppression together).
    Their times are the limiter's clock, as every deadline is. The slow start after a hold is
    kept per relay (:func:`relay_of`). With ``MAILGUARD_PROVIDER_HOLDS`` on (the default), the
    finder of each recipient's provider: the limiter's when its policy has provider tiers, else
    one of its own (:func:`build_providers`; it asks DNS only for a provider's reply)."""
    client = None if limiter is None else limiter.client
    same_url = settings.effective_ledger_url == settings.limiter_url
    if client is None and isinstance(ledger, RedisLedger) and same_url:
        client = ledger.client
    finder = None
    if settings.provider_holds:
        finder = limiter.providers if limiter is not None else None
        finder = finder or build_providers(settings, limiter)
    with _naming("LIMITER_URL"):
        return holds_from_url(
            settings.limiter_url,
            secret=settings.secret,
            client=client,
            clock=None if limiter is None else limiter.now,
            max_hold=settings.throttle_hold_max,
            pace_start=settings.pace_start,
            pace_step=settings.pace_step,
            pace_window=settings.pace_window,
            relay=relay_of(settings),
            providers=finder,
        )


def relay_of(settings: Settings) -> str:
    """What names the relay mail leaves through, so each relay has its own pace: ``smtp:<host>:
    <port>:<user>`` (``MAILGUARD_SMTP_URL``, never its password), ``ses:<region>:<endpoint>``,
    ``anymail:<esp>``, ``django:<backend>``. Stored only as a keyed hash (the pace's key)."""
    if settings.transport == "ses":
        return f"ses:{settings.ses_region or ''}:{settings.ses_endpoint_url or ''}"
    if settings.transport == "anymail":
        return f"anymail:{settings.anymail_esp or ''}"
    if settings.transport == "django":
        return f"django:{settings.django_backend or ''}"
    url = urlsplit(settings.smtp_url)
    try:
        port = url.port
    except ValueError:  # refused at start by the settings' checks; named by the rest here
        port = None
    return f"{settings.transport}:{url.hostname or url.scheme}:{port or ''}:{url.username or ''}"


def build_transport(settings: Settings) -> Transport:
    """The transport ``MAILGUARD_TRANSPORT`` names (:mod:`mailer.mail.transports.registry`):
    ``smtp`` by ``MAILGUARD_SMTP_URL`` (``console://`` prints to stderr, ``memory://`` keeps
    the mails in the process), ``django``, ``ses`` or ``anymail``. Raises ``ValueError`` naming the
    variable."""
    return transports.build(settings.transport, settings.transport_options())


@contextmanager
def _naming(variable: str) -> Iterator[None]:
    """Re-raise a ``ValueError`` with the ``MAILGUARD_`` variable it came from in front."""
    try:
        yield
    except ValueError as exc:
        raise ValueError(f"MAILGUARD_{variable}: {exc}") from None


def build_guard(settings: Settings, *, metrics: Metrics | None = None) -> Guard:
    """A guard wired from ``settings``: one per process (build it after a fork, not before).

    ``metrics`` defaults to prometheus-client's global registry; a process that only checks
    that the parts can be built (a worker's main process at start) passes ``NO_METRICS``.
    """
    limiter = build_guard_limiter(settings)
    ledger = build_ledger(settings, limiter)
    suppressions = build_suppressions(settings, ledger)
    return Guard(
        limiter,
        ledger,
        build_transport(settings),
        kinds=settings.kinds,
        config=settings.guard_config(),
        suppressions=suppressions,
        holds=build_holds(settings, limiter, ledger)
        if settings.throttle_hold is not None
        else None,
        clock=system_clock,
        metrics=metrics if metrics is not None else default_metrics(),
        unsubscribe=build_unsubscribe(settings, suppressions),
        reputation=build_reputation(settings, ledger),
        warmup=build_warmup(settings, limiter),
    )


def rebuild_guard(old: Guard, settings: Settings) -> Guard:
    """A guard for another policy and kinds (``settings``'s: a live policy version) that keeps
    ``old``'s ledger, transport, suppression list, configuration and metrics. The limiter is
    new, on the same storage and namespace: the recipient scope's keys stay the same, so the
    bookings made under ``old`` stay valid. ``old`` stays usable for a run still in it.
    ``ValueError`` (one line) for a policy this storage cannot serve, or whose recipient keys
    differ from ``old``'s (:func:`check_same_keys`)."""
    limiter = build_guard_limiter(settings)
    check_same_keys(old.limiter, limiter)
    return Guard(
        limiter,
        old.ledger,
        old.transport,
        kinds=settings.kinds,
        config=old.config,
        suppressions=old.suppressions,
        holds=build_holds(settings, limiter, old.ledger) if old.holds is not None else None,
        clock=system_clock,
        metrics=old.metrics,
        unsubscribe=old.unsubscribe,
        reputation=old.reputation,
        warmup=old.warmup,
    )


#: A recipient whose storage keys tell whether two limiters share the recipient scope's keys.
_PROBE = "probe@example.com"


def check_same_keys(old: Limiter, new: Limiter) -> None:
    """``ValueError`` unless ``new`` keeps a recipient's state under the same key as ``old``: a
    policy of recipient sliding tiers alone and a policy with other scopes or tier kinds are
    stored differently, and a change between them would forget every count and booking (a
    recipient could get more mail than either policy allows)."""
    if old.storage_key("recipient", _PROBE) != new.storage_key("recipient", _PROBE):
        raise ValueError(
            f"policy {str(new.policy)[:80]!r} keeps the recipient scope under other keys than "
            f"{str(old.policy)[:80]!r} (a recipient-only policy to a scoped one, or back): "
            "every count and booking would be lost; change MAILGUARD_POLICY and restart the "
            "workers instead"
        )


def memory_guard(
    limiter: Limiter,
    ledger: Ledger,
    transport: Transport,
    *,
    kinds: Kinds | None = None,
    config: GuardConfig | None = None,
    clock: Clock | None = None,
    metrics: Metrics | None = None,
    suppressions: Suppressions | None = None,
    holds: Holds | None = None,
    warmup: Warmup | None = None,
) -> Guard:
    """A guard whose suppression list and holds live in this process unless given: for tests,
    examples and single-process tools. Not for workers: each process would keep its own list
    and holds (use :func:`build_guard`).

    Defaults: the default kinds, ``GuardConfig()``, the system clock, the global metrics;
    holds only when ``config.throttle_hold`` is not None (else they are off, even if given).
    """
    config = config or GuardConfig()
    clock = clock or system_clock
    if config.throttle_hold is None:
        holds = None
    elif holds is None:
        holds = Holds.from_url("memory://", clock=clock, max_hold=config.throttle_hold_max)
    return Guard(
        limiter,
        ledger,
        transport,
        suppressions=suppressions or Suppressions.from_url("memory://", clock=clock),
        holds=holds,
        kinds=kinds or Kinds.defaults(),
        config=config,
        clock=clock,
        metrics=metrics if metrics is not None else default_metrics(),
        warmup=warmup,
    )
