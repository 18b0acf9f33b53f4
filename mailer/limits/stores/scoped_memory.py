"""In-process store for any policy: every scope's state in one dict behind one lock, decided by
:mod:`mailer.limits.algorithm`.

For tests, simulations, the demo, a threads or solo pool: as with
:mod:`mailer.limits.stores.memory`, two processes each holding one enforce the limits each on
its own (a store used after a fork warns once).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from mailer.clock import Clock, system_clock
from mailer.limits.algorithm import Decider, ScopeState, States
from mailer.limits.checks import MAX_BOOKINGS
from mailer.limits.decision import Decision
from mailer.limits.keys import check_key
from mailer.limits.policy import Policy
from mailer.limits.scopes import Scope, build_scopes, find_scope
from mailer.limits.stores.memory import fork_generation, warn_forked
from mailer.limits.windows import zone

#: Every this many calls, every idle state is evicted.
_EVICT_EVERY = 64

_Keys = list[tuple[Scope, tuple[str, bytes]]]


class ScopedMemoryStore:
    """Every scope's :class:`~mailer.limits.algorithm.ScopeState` in a dict, thread-safe.

    ``clock`` returns epoch seconds (default: the system clock); ``tz`` (an IANA name) aligns
    ``fixed`` windows. A state is forgotten once nothing in it matters any more.
    """

    url = "memory://"
    client = None

    def __init__(
        self,
        policy: Policy,
        *,
        clock: Clock | None = None,
        namespace: str = "mailguard",
        secret: str | bytes | None = None,
        tz: str = "UTC",
        max_bookings: int = MAX_BOOKINGS,
    ) -> None:
        self.policy = policy
        #: The time zone ``fixed`` windows align to.
        self.tz = zone(tz)
        self._decider = Decider(self.tz, max_bookings)
        self._scopes = build_scopes(policy, secret=secret, namespace=namespace)
        self._clock = clock or system_clock
        self._states: dict[tuple[str, bytes], ScopeState] = {}
        self._lock = threading.Lock()
        self._calls = 0
        self._generation = fork_generation()

    def now(self) -> float:
        """The clock this store decides on (epoch seconds)."""
        return self._clock()

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
        keys = self._keys(recipient, None, tenant, provider)
        with self._lock:
            now_us = round(self._clock() * 1_000_000)
            states = self._load(keys, now_us)
            decision = self._decider.acquire(
                states,
                now_us,
                tag=tag,
                max_wait_ms=max_wait_ms,
                share=share,
                not_before=not_before_ms,
            )
            if decision.refused:  # a refusal leaves nothing behind, not even an empty state
                for (_, key), (_, state) in zip(keys, states, strict=True):
                    if state is not None and state.empty:
                        del self._states[key]
            return decision

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
        keys = self._keys(recipient, domain, tenant, provider)
        with self._lock:
            now_us = round(self._clock() * 1_000_000)
            states = self._load(keys, now_us, create=False)
            return self._decider.decide(
                states, now_us, tag=0, max_wait_ms=0, share=share, record=False
            )

    def release(
        self, recipient: str, tag: int, tenant: str | None, provider: str | None = None
    ) -> bool:
        keys = self._keys(recipient, None, tenant, provider)
        with self._lock:
            now_us = round(self._clock() * 1_000_000)
            states = self._load(keys, now_us, create=False)
            head = states[0][1]
            if head is None or tag not in head.tags:
                return False
            at = head.ts[head.tags.index(tag)]
            for scope, state in states:
                if state is not None:
                    self._decider.give_back(scope, state, tag, at)
            return True

    def storage_key(self, scope: str, key: str) -> str:
        return find_scope(self._scopes, scope, self.policy).hasher.storage_key(key)

    def reset(self, recipient: str | None) -> None:
        with self._lock:
            if recipient is None:
                self._states.clear()
            else:
                self._states.pop(("recipient", self._scopes[0].hasher.digest(recipient)), None)

    def close(self) -> None:
        self.reset(None)

    def _keys(
        self, recipient: str, domain: str | None, tenant: str | None, provider: str | None
    ) -> _Keys:
        if self._generation != fork_generation():
            self._generation = fork_generation()
            warn_forked()
        out = []
        for scope in self._scopes:
            subject = scope.subject(recipient, domain, tenant, provider)
            if subject is not None:
                out.append((scope, (scope.name, scope.hasher.digest(check_key(subject)))))
        return out

    def _load(self, keys: _Keys, now_us: int, *, create: bool = True) -> States:
        self._calls += 1
        if self._calls % _EVICT_EVERY == 0:
            self._evict(now_us // 1000)
        out: States = []
        for scope, key in keys:
            state = self._states.get(key)
            if state is None and create:
                state = self._states[key] = ScopeState()
            if state is not None:
                self._decider.prune(scope, state, now_us)
            out.append((scope, state))
        return out

    def _evict(self, now_ms: int) -> None:
        for key in [k for k, s in self._states.items() if s.expires_ms <= now_ms]:
            del self._states[key]
