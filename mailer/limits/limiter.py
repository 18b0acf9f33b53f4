"""The limiter: may a mail go to this recipient now, under every scope and tier of the policy,
and if not, when?

>>> from mailer import Limiter, ManualClock, Policy
>>> clock = ManualClock(1_000.0)
>>> limiter = Limiter.from_url("memory://", Policy.parse("1/60s, 5/1h, 10/24h"), clock=clock)
>>> limiter.acquire("ada@example.com").allowed
True
>>> limiter.acquire("ada@example.com").wait
60.0
>>> scoped = Limiter.from_url("memory://", Policy.parse("recipient: 1/1s; sender: 2/1s gcra"),
...                           clock=clock)
>>> scoped.acquire("ada@example.com").allowed, scoped.acquire("bob@example.com").allowed
(True, True)
>>> d = scoped.acquire("cy@example.com"); d.allowed, d.wait, d.scope, str(d.tier)
(False, 0.5, 'sender', '2/1s gcra')

One class for every policy: the store its URL and policy choose (:func:`mailer.limits.stores.
open_store`) decides, in memory or on Redis; a policy of recipient sliding tiers only gets the
single-key stores, a faster path with the same answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from mailer.clock import Clock
from mailer.errors import mask_url
from mailer.limits.checks import (
    MAX_BOOKINGS,
    MAX_WAIT,
    check_max_wait,
    check_share,
    check_tenant,
    not_before_ms,
)
from mailer.limits.decision import Decision
from mailer.limits.keys import MAX_KEY_LENGTH, check_key, mail_tag
from mailer.limits.ordering import check_order
from mailer.limits.policy import Policy, Tier
from mailer.limits.scopes import STATUS_RECIPIENT, build_scopes, scope_tiers
from mailer.limits.stores import Store, open_store
from mailer.storage import is_redis

__all__ = ["MAX_WAIT", "Limiter", "Providers", "not_before_ms", "require_secret"]


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class Providers(Protocol):
    """What a limiter asks a mail's provider of: :class:`mailer.providers.ProviderFinder`
    (its answers cached: a known domain costs a dict lookup, never a DNS query)."""

    def provider_of(self, domain: str) -> _Named:
        """The provider (its ``name``) of recipient ``domain``."""
        ...


def require_secret(url: str, secret: str | bytes | None, entry: str) -> None:
    """The workers' rule for a library entry point: shared storage (any Redis URL) needs the
    ``secret`` they key their hashes with, else it would read a budget of its own; ``ValueError``
    (one line naming ``secret=`` and ``MAILGUARD_SECRET``). ``memory://`` needs none."""
    if is_redis(url) and not secret:
        raise ValueError(
            f"{entry}: {mask_url(url)} is shared storage and needs secret=, the workers' "
            "MAILGUARD_SECRET (e.g. secret=Settings.from_env().secret): without it the keys "
            "differ from theirs and it reads another budget"
        )


class Limiter:
    """Enforces every scope and tier of one :class:`Policy`, atomically, on one store.

    Subjects (normalised addresses, domains, tenants) are hashed with ``secret`` before they
    reach storage. Build with :meth:`from_url`. All methods are thread-safe.

    A policy with provider tiers (``provider: ...``, ``provider google: ...``) counts each mail
    under its recipient domain's provider: ``providers`` (a :class:`~mailer.providers.
    ProviderFinder`) names it from MX, asked here on every call that does not give
    ``provider=`` (acquire, peek, release: so every caller, the guard's and the CLI's, counts
    and gives back under the same provider); without ``providers`` each domain is its own
    provider. A policy without provider tiers never asks.
    """

    def __init__(self, policy: Policy, store: Store, providers: Providers | None = None) -> None:
        self.policy = policy
        self.store = store
        self.url = store.url
        #: Finds a mail's provider (None: each domain its own); asked only by provider policies.
        self.providers = providers
        self._by_provider = policy.provider_scoped

    @classmethod
    def from_url(
        cls,
        url: str,
        policy: Policy,
        *,
        secret: str | bytes | None = None,
        clock: Clock | None = None,
        namespace: str = "mailguard",
        tz: str = "UTC",
        max_bookings: int = MAX_BOOKINGS,
        providers: Providers | None = None,
    ) -> Limiter:
        """Build a limiter on ``memory://``, ``redis://``, ``rediss://``, ``unix://``,
        ``redis+cluster://`` or ``redis+sentinel://`` storage (see
        :func:`mailer.storage.client_from_url` for the URL forms).

        ``secret`` keys the hash of every stored key: the same on every worker, required on
        Redis (``ValueError`` without it, as a worker refuses to start without
        ``MAILGUARD_SECRET``); ``memory://`` may go without.
        ``clock`` returns epoch seconds. Memory reads it (default: the system clock). Redis
        reads the server's ``TIME`` unless a clock is given; give one only in tests and
        simulations, since workers' clocks disagree. ``tz`` (an IANA name, default UTC)
        aligns ``fixed`` tiers' calendar windows. ``max_bookings`` bounds the entries one key
        of a shared scope keeps (``MAILGUARD_MAX_BOOKINGS``): a mail that would add one more
        is refused with ``scope`` set and no ``tier`` (:func:`~mailer.limits.decision.
        backlog_full`). ``providers`` finds a mail's provider for the provider scopes (see the
        class doc). Raises ``ValueError`` for another URL.
        """
        require_secret(url, secret, "Limiter.from_url")
        store = open_store(
            url,
            policy,
            clock=clock,
            namespace=namespace,
            secret=secret,
            tz=tz,
            max_bookings=max_bookings,
        )
        return cls(policy, store, providers)

    @property
    def client(self) -> Any:
        """The store's redis-py client, to share its connection pool; None in memory."""
        return self.store.client

    def now(self) -> float:
        """Epoch seconds on the clock this limiter decides on: memory's clock; on Redis the
        server's ``TIME`` (or the given clock), read once every 10 s per process and carried
        forward on the monotonic clock in between, so it costs no round trip per call and no
        worker's wall clock moves it. Compare slots and deadlines with this, not a local clock.
        Raises :class:`mailer.errors.BackendUnavailable` when the server was never reached."""
        return self.store.now()

    def storage_key(self, scope: str, key: str) -> str:
        """The hashed key under which ``key``'s state in ``scope`` is stored (safe to log).

        ``ValueError`` for a scope the policy does not limit.
        """
        return self.store.storage_key(scope, check_key(key))

    def acquire(
        self,
        recipient: str,
        *,
        tenant: str | None = None,
        mail_id: str | None = None,
        max_wait: float = 0.0,
        share: float = 1.0,
        not_before: float | None = None,
        late_after: float | None = None,
        order: str = "",
        provider: str | None = None,
    ) -> Decision:
        """Admit one mail to ``recipient`` now, book a later slot, or refuse; atomically over
        every tier of every scope the mail has a key in.

        ``tenant`` counts the mail in that tenant's scope (none: in no tenant). ``provider``
        names the mail's provider for the provider scopes (default: :meth:`provider_of`).
        ``max_wait``
        (seconds) > 0 turns on reservations: when the earliest time every scope admits is at
        most that far away it is booked under ``mail_id`` and returned with ``booked=True``.
        With a ``mail_id`` that already holds an admission or booking, that same slot is
        returned and nothing more is consumed. A refusal consumes nothing. ``share`` in
        (0, 1] caps this mail's kind in the shared scopes (domain, sender, tenant, providers).
        ``not_before`` (epoch seconds, e.g. the end of a hold after a throttling reply) makes
        the slot the earliest admissible time at or after it: booked (within ``max_wait``),
        never now. ``Decision.scope`` and ``.tier`` name the binding scope and tier.
        ``late_after`` (seconds; only where :attr:`judges_lateness`, else ignored): a mail id
        whose booking or admission is reached more than that after its slot is judged again
        now against the recipient's entries actually sent, in booked order: behind the
        bookings reached before it, the bookings after it moved back as far as the policy
        then requires (``sliding_log._held``, ``_judged``).
        ``order`` (only where :attr:`keeps_order`, else ignored): the mail's order stamp
        (:func:`mailer.limits.ordering.order_key`; with a ``mail_id``); a booking takes the
        slot of a future booking stamped after it, which moves one place back
        (:func:`mailer.limits.ordering.keep_order`).
        Raises ``ValueError`` for a bad argument, :class:`mailer.errors.BackendUnavailable`
        when the storage cannot be reached.
        """
        if order and self.keeps_order:
            return self._acquire_ordered(
                recipient, mail_id, max_wait, late_after, not_before, check_order(order)
            )
        if late_after is not None and self.judges_lateness:
            return self._acquire_late(recipient, mail_id, max_wait, late_after, not_before)
        # The common case (a str key, no mail id, no wait) skips the helper calls: hot path.
        if type(recipient) is not str or not 0 < len(recipient) <= MAX_KEY_LENGTH:
            check_key(recipient)
        tag = 0 if mail_id is None else mail_tag(mail_id)
        wait_ms = 0 if max_wait == 0.0 else check_max_wait(max_wait)
        if tenant is not None:
            check_tenant(tenant)
        if share != 1.0 or type(share) is not float:
            share = check_share(share)
        if self._by_provider and provider is None:
            provider = self.provider_of(recipient)
        if not_before is None and tenant is None and share == 1.0 and provider is None:
            return self.store.acquire(recipient, tag, wait_ms)  # positional: the faster call
        nb = 0 if not_before is None else not_before_ms(not_before)
        if provider is None:
            return self.store.acquire(
                recipient, tag, wait_ms, tenant, share=share, not_before_ms=nb
            )
        return self.store.acquire(
            recipient, tag, wait_ms, tenant, share=share, not_before_ms=nb, provider=provider
        )

    def provider_of(self, recipient: str) -> str | None:
        """The provider the provider scopes count a mail to ``recipient`` under: its domain's,
        from :attr:`providers` (cached there); None (the domain is its own provider) without
        provider tiers, without a finder, or for a recipient without a usable domain."""
        if not self._by_provider or self.providers is None:
            return None
        domain = recipient.rpartition("@")[2]
        if not domain:
            return None
        try:
            return self.providers.provider_of(domain).name
        except ValueError:  # not a domain the finder takes (too long): its own provider
            return None

    @property
    def judges_lateness(self) -> bool:
        """Whether :meth:`acquire` judges a late booked mail itself (``late_after``): a policy
        of recipient sliding tiers only (the single-key stores); else the caller re-books."""
        return bool(getattr(self.store, "judges_lateness", False))

    @property
    def keeps_order(self) -> bool:
        """Whether :meth:`acquire` keeps a recipient's booked order (``order``): a policy of
        recipient sliding tiers only (the single-key stores); else mails book as they come."""
        return bool(getattr(self.store, "keeps_order", False))

    def _acquire_ordered(  # noqa: PLR0917 - acquire's own arguments, checked here
        self,
        recipient: str,
        mail_id: str | None,
        max_wait: float,
        late_after: float | None,
        not_before: float | None,
        order: str,
    ) -> Decision:
        check_key(recipient)
        late_ms = -1 if late_after is None or not self.judges_lateness else _late_ms(late_after)
        nb = 0 if not_before is None else not_before_ms(not_before)
        return self.store.acquire(  # type: ignore[call-arg]
            recipient,
            0 if mail_id is None else mail_tag(mail_id),
            check_max_wait(max_wait),
            None,
            not_before_ms=nb,
            late_ms=late_ms,
            order=order,
        )

    def _acquire_late(
        self,
        recipient: str,
        mail_id: str | None,
        max_wait: float,
        late_after: float,
        not_before: float | None,
    ) -> Decision:
        check_key(recipient)
        late_ms = _late_ms(late_after)
        nb = 0 if not_before is None else not_before_ms(not_before)
        return self.store.acquire(  # type: ignore[call-arg]
            recipient,
            0 if mail_id is None else mail_tag(mail_id),
            check_max_wait(max_wait),
            None,
            not_before_ms=nb,
            late_ms=late_ms,
        )

    def acquire_many(
        self,
        recipients: Sequence[str],
        *,
        mail_ids: Sequence[str | None] | None = None,
        max_wait: float = 0.0,
        providers: Sequence[str | None] | None = None,
    ) -> list[Decision]:
        """:meth:`acquire` for many recipients, answers in order: in one round trip (one
        script call) on one Redis for a single-key policy, one call each otherwise.
        ``providers``: each recipient's provider (default: :meth:`provider_of`).

        Each decision is atomic on its own; rely on nothing more (on Redis Cluster, and in
        memory, the recipients are decided one after the other).
        """
        if mail_ids is not None and len(mail_ids) != len(recipients):
            raise ValueError("mail_ids must have one entry per key")
        ids: Sequence[str | None] = mail_ids if mail_ids is not None else [None] * len(recipients)
        if providers is not None and len(providers) != len(recipients):
            raise ValueError("providers must have one entry per key")
        checked = [check_key(r) for r in recipients]
        tags = [mail_tag(m) for m in ids]
        if not self._by_provider:
            return self.store.acquire_many(checked, tags, check_max_wait(max_wait))
        found = providers if providers is not None else [self.provider_of(r) for r in checked]
        wait_ms = check_max_wait(max_wait)
        return [
            self.store.acquire(r, tag, wait_ms, None, provider=p)
            for r, tag, p in zip(checked, tags, found, strict=True)
        ]

    def peek(
        self,
        recipient: str,
        *,
        tenant: str | None = None,
        share: float = 1.0,
        domain: str | None = None,
        provider: str | None = None,
    ) -> Decision:
        """Answer as :meth:`acquire` would for a fresh mail now, consuming nothing.

        For a web form that wants to say "try again in 42 s" before enqueueing. ``domain``
        (default: the recipient's) asks about another domain's scope, ``provider`` (default:
        :meth:`provider_of`) about another provider's.
        """
        check_key(recipient)
        check_tenant(tenant)
        if self._by_provider and provider is None:
            provider = self.provider_of(recipient if domain is None else "@" + domain)
        if provider is None:
            return self.store.peek(recipient, tenant, share=check_share(share), domain=domain)
        return self.store.peek(
            recipient, tenant, share=check_share(share), domain=domain, provider=provider
        )

    def room(self, scope: str, key: str) -> tuple[tuple[Tier, int], ...]:
        """Per tier of ``scope``, how many more admissions ``key`` has room for now.

        ``key`` is the scope's subject: an address (``recipient``), a domain, ``sender``, a
        tenant's name, or a provider's (``provider``: any provider's name; ``provider NAME``:
        NAME). Read with :meth:`peek` (memory or Redis alike): nothing is consumed.
        """
        kept = scope_tiers(self.policy)
        if scope not in {name for name, _ in kept}:
            raise ValueError(f"policy {self.policy} has no scope {scope!r}")
        recipient = key if scope == "recipient" else STATUS_RECIPIENT
        domain = key if scope == "domain" else None
        tenant = key if scope == "tenant" else None
        provider = key if scope.startswith("provider") else None
        if provider is None and self._by_provider:  # another scope: the domain is its own
            provider = domain or STATUS_RECIPIENT.rpartition("@")[2]
        remaining = self.peek(recipient, domain=domain, tenant=tenant, provider=provider).remaining
        offset = 0
        for kept_scope in build_scopes(self.policy, secret=None, namespace="mailguard"):
            tiers = kept_scope.tiers
            if kept_scope.name == scope:
                return tuple(zip(tiers, remaining[offset : offset + len(tiers)], strict=True))
            if kept_scope.subject(recipient, domain, tenant, provider) is not None:
                offset += len(tiers)  # a scope the mail has no subject in: its tiers not asked
        raise AssertionError("unreachable: the scope is one of the policy's")

    def release(
        self,
        recipient: str,
        mail_id: str,
        *,
        tenant: str | None = None,
        provider: str | None = None,
    ) -> bool:
        """Give ``mail_id``'s admission or booking back in every scope; whether there was one.

        For a mail that failed for good: the recipient should not pay for our failure.
        ``provider`` (default: :meth:`provider_of`, as :meth:`acquire` asks) names the provider
        scope it is given back in: the one it was counted in unless its domain's provider
        changed in between (its MX first learnt, or changed at its TTL), when it is given back
        in the new one's, as a mail of a tenant given back under another tenant would be.
        """
        tag = mail_tag(mail_id)
        checked = check_key(recipient)
        if self._by_provider and provider is None:
            provider = self.provider_of(checked)
        if provider is None:
            return self.store.release(checked, tag, tenant)
        return self.store.release(checked, tag, tenant, provider)

    def reset(self, recipient: str | None = None) -> None:
        """Forget every admission and booking of ``recipient`` (its own keys: shared scopes
        keep what it sent), or with None everything this limiter holds (memory only: Redis
        refuses with a ``ValueError``, its storage is shared)."""
        self.store.reset(None if recipient is None else check_key(recipient))

    def close(self) -> None:
        """Release the store's connections (memory: forget everything)."""
        self.store.close()


def _late_ms(late_after: float) -> int:
    """``late_after`` (seconds, 0 to ``MAX_WAIT``) as whole ms; ``ValueError`` otherwise."""
    if not 0 <= late_after <= MAX_WAIT:
        raise ValueError(f"late_after must be 0 to {MAX_WAIT:.0f} seconds, got {late_after}")
    return int(late_after * 1000)
