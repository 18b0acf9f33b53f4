"""The live policy as the workers and the CLI use it: :class:`LivePolicies` over a
:class:`~mailer.records.policy.base.PolicyStore`, and :func:`policies_from_url`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mailer.clock import Clock, system_clock
from mailer.records.policy.base import LivePolicy, PolicyStore
from mailer.records.policy.memory import MemoryPolicyStore
from mailer.records.policy.redis import RedisPolicyStore
from mailer.storage import client_from_url, is_memory


class LivePolicies:
    """Store, read and list live policy versions. Every method raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="ledger"``) when Redis is down."""

    def __init__(self, store: PolicyStore, *, clock: Clock | None = None) -> None:
        self.store = store
        self._clock = clock or system_clock

    def version(self) -> int:
        """The version in force, 0 when none is stored (the environment's policy holds)."""
        return self.store.version()

    def get(self, version: int) -> LivePolicy | None:
        """Stored ``version``, or None; ``ValueError`` for a stored value that is not one."""
        raw = self.store.get(version)
        return None if raw is None else LivePolicy.from_json(raw, version)

    def current(self) -> LivePolicy | None:
        """The version in force, or None; ``ValueError`` for a stored value that is not one."""
        version = self.version()
        return None if version == 0 else self.get(version)

    def set(self, candidate: LivePolicy) -> LivePolicy:
        """Store ``candidate`` (checked by the caller with :meth:`LivePolicy.apply`) as the next
        version, in force from now: it, with its version and time."""
        stamped = replace(candidate, set_at=self._clock(), version=0)
        return replace(stamped, version=self.store.put(stamped.to_json()))

    def history(self) -> list[LivePolicy | tuple[int, str]]:
        """Every version, oldest first; one that does not read as a policy is ``(version, why)``."""
        shown: list[LivePolicy | tuple[int, str]] = []
        for version, raw in self.store.history():
            try:
                shown.append(LivePolicy.from_json(raw, version))
            except ValueError as exc:
                shown.append((version, str(exc)))
        return shown


def policies_from_url(
    url: str, *, namespace: str = "mailguard", clock: Clock | None = None, client: Any = None
) -> LivePolicies:
    """The live policy on ``memory://`` (this process only) or a Redis URL (the ledger's);
    ``client`` reuses a redis-py client."""
    store: PolicyStore
    if is_memory(url):
        store = MemoryPolicyStore()
    else:
        store = RedisPolicyStore(
            client if client is not None else client_from_url(url), url, namespace
        )
    return LivePolicies(store, clock=clock)
