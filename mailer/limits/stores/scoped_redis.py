"""Redis store for any policy: one ``EVALSHA`` of ``lua/scoped.lua`` per decision over every
scope the mail has a key in (one Redis, or Sentinel's master).

On Redis Cluster a mail's scopes live in different slots, so a decision over several goes scope
by scope (:mod:`mailer.limits.stores.scoped_cluster`), on one clock read from the cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from mailer.clock import Clock
from mailer.limits.checks import MAX_BOOKINGS
from mailer.limits.decision import Decision
from mailer.limits.policy import Policy
from mailer.limits.scopes import find_scope
from mailer.limits.stores.redis import close_client
from mailer.limits.stores.scoped_cluster import Asked, ClusterDecider
from mailer.limits.stores.scoped_script import Planned, ScopedScript, refused_data
from mailer.limits.stores.server_clock import redis_clock
from mailer.storage import (
    client_from_url,
    is_cluster,
    redis_down_as_unavailable,
    run_script,
)


class ScopedRedisStore:
    """Runs the compiled scoped script; raises :class:`BackendUnavailable` when Redis is down."""

    def __init__(
        self,
        policy: Policy,
        url: str,
        *,
        clock: Clock | None = None,
        namespace: str = "mailguard",
        secret: str | bytes | None = None,
        tz: str = "UTC",
        client: Any = None,
        max_bookings: int = MAX_BOOKINGS,
    ) -> None:
        self.url = url
        self.policy = policy
        self.script = ScopedScript(
            policy,
            clock=clock,
            namespace=namespace,
            secret=secret,
            tz=tz,
            max_bookings=max_bookings,
        )
        self._client = client if client is not None else client_from_url(url)
        self._clock = clock
        self._server_clock = redis_clock(self._client, url)
        self._cluster = (
            ClusterDecider(self.call, url)
            if is_cluster(url) and len(self.script.scopes) > 1
            else None
        )

    @property
    def client(self) -> Any:
        """The redis-py client (shared connection pool)."""
        return self._client

    def now(self) -> float:
        """The clock the script decides on: the given one, else the server's (estimated,
        :mod:`~mailer.limits.stores.server_clock`)."""
        return self._clock() if self._clock is not None else self._server_clock()

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
        planned = self.script.plan(
            "a",
            recipient,
            tenant=tenant,
            tag=tag,
            max_wait_ms=max_wait_ms,
            share=share,
            not_before=not_before_ms,
            provider=provider,
        )
        answer: Decision = self._run(planned)
        return answer

    def acquire_many(
        self, recipients: Sequence[str], tags: Sequence[int], max_wait_ms: int
    ) -> list[Decision]:
        return [
            self.acquire(r, tag, max_wait_ms, None) for r, tag in zip(recipients, tags, strict=True)
        ]

    def peek(
        self,
        recipient: str,
        tenant: str | None,
        *,
        share: float = 1.0,
        domain: str | None = None,
        provider: str | None = None,
    ) -> Decision:
        planned = self.script.plan(
            "p", recipient, tenant=tenant, domain=domain, share=share, provider=provider
        )
        answer: Decision = self._run(planned)
        return answer

    def release(
        self, recipient: str, tag: int, tenant: str | None, provider: str | None = None
    ) -> bool:
        planned = self.script.plan("r", recipient, tenant=tenant, tag=tag, provider=provider)
        return bool(self._run(planned))

    def storage_key(self, scope: str, key: str) -> str:
        return find_scope(self.script.scopes, scope, self.policy).hasher.storage_key(key)

    def reset(self, recipient: str | None) -> None:
        """Delete ``recipient``'s own keys (its log, gcra buckets and fixed-window counts)."""
        if recipient is None:
            raise ValueError(
                "a Redis limiter forgets one recipient at a time (its storage is shared): "
                "give a recipient"
            )
        base = self.storage_key("recipient", recipient)
        with redis_down_as_unavailable(self.url):
            keys = [key for key in self._client.scan_iter(match=base + ":*", count=1000)]
            if keys:
                self._client.delete(*keys)

    def close(self) -> None:
        close_client(self._client)

    def call(self, keys: list[str], args: list[Any]) -> Any:
        """One script call: ``keys`` the present scopes' base keys, ``args`` ARGV."""
        script = (self.script.source, self.script.sha)
        try:
            return run_script(self._client, script, keys, args, self.url)
        except redis.exceptions.ResponseError as exc:
            raise refused_data(exc) from None

    def _run(self, planned: Planned) -> Any:
        """A decision (``a``, ``p``) or whether a slot was released (``r``: 1 or 0)."""
        if self._cluster is not None and len(planned.present) > 1:
            return self._on_cluster(planned, self._cluster)
        raw = self.call(planned.keys, planned.argv())
        if planned.args[0] == "r":
            return raw
        return self.script.decision(raw, planned.present)

    def _on_cluster(self, planned: Planned, cluster: ClusterDecider) -> Decision | int:
        """:meth:`_run` on Redis Cluster: scope by scope, on one clock read from the cluster
        (or the given one)."""
        mode, given, tag, max_wait_ms, share, offset = planned.args[:6]
        clock = str(given) if given != "" else f"t{self._cluster_now_us()}"
        scopes = [(k, s.digit) for k, s in zip(planned.keys, planned.present, strict=True)]
        asked = Asked(scopes, clock, share, offset, planned.months)
        return cluster.decide(
            mode,
            asked,
            tag=tag,
            max_wait_ms=max_wait_ms,
            not_before=planned.not_before,
            tiers=[(s.name, s.tiers) for s in planned.present],
        )

    def _cluster_now_us(self) -> int:
        """The cluster's clock in µs (``TIME`` of one node: every node's on one host)."""
        with redis_down_as_unavailable(self.url):
            seconds, micros = self._client.time()
        return int(seconds) * 1_000_000 + int(micros)
