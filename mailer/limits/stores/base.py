"""What every limiter store offers :class:`mailer.Limiter`: atomic operations over every scope
and tier of the policy it was built for.

Arguments arrive checked (a str recipient, ints in ms, a tag from
:func:`mailer.limits.keys.mail_tag`, 0 for no mail id); subjects arrive in clear and each store
hashes them its own way. Every operation is one atomic step (on Redis Cluster with several
scopes: see :mod:`mailer.limits.stores.scoped_cluster`). A store that cannot reach its storage
raises :class:`mailer.errors.BackendUnavailable`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from mailer.limits.decision import Decision


class Store(Protocol):
    """Storage and decision for one policy: memory or Redis, single key or scoped."""

    #: The storage URL (memory: ``memory://``).
    url: str

    @property
    def client(self) -> Any:
        """The redis-py client (its connection pool may be shared); None in memory."""

    def now(self) -> float:
        """Epoch seconds on the clock this store decides on: the injected clock, else (Redis)
        the server's ``TIME``, read once every few seconds and carried forward on this
        process's monotonic clock (:mod:`~mailer.limits.stores.server_clock`). Raises
        :class:`mailer.errors.BackendUnavailable` when the server was never reached."""

    def acquire(
        self,
        recipient: str,
        tag: int,
        max_wait_ms: int,
        tenant: str | None = None,
        *,
        share: float = 1.0,
        not_before_ms: int = 0,
        provider: str | None = None,
    ) -> Decision:
        """Admit now, book within ``max_wait_ms``, or refuse (:meth:`mailer.Limiter.acquire`);
        ``provider`` (the mail's provider's name) for the provider scopes (None: the domain)."""

    def acquire_many(
        self, recipients: Sequence[str], tags: Sequence[int], max_wait_ms: int
    ) -> list[Decision]:
        """:meth:`acquire` for each recipient (no tenant, full share), answers in order."""

    def peek(
        self,
        recipient: str,
        tenant: str | None,
        *,
        share: float = 1.0,
        domain: str | None = None,
        provider: str | None = None,
    ) -> Decision:
        """Answer as :meth:`acquire` would for a fresh mail now, recording nothing."""

    def release(
        self, recipient: str, tag: int, tenant: str | None, provider: str | None = None
    ) -> bool:
        """Give the mail's slot back in every scope; whether it held one."""

    def storage_key(self, scope: str, key: str) -> str:
        """``key``'s hashed storage key in ``scope``; ``ValueError`` for a scope not kept."""

    def reset(self, recipient: str | None) -> None:
        """Forget ``recipient``'s own keys, or (None) everything this store holds."""

    def close(self) -> None:
        """Release connections (memory: forget everything)."""
