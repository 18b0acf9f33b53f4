"""The multi-tier limiter: may this key (a recipient) be sent a mail now, and if not, when?

>>> from mailer import Limiter, ManualClock, Policy
>>> clock = ManualClock(1_000.0)
>>> limiter = Limiter.from_url("memory://", Policy.parse("1/60s, 5/1h, 10/24h"), clock=clock)
>>> limiter.acquire("ada@example.com").allowed
True
>>> limiter.acquire("ada@example.com").retry_after
60.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from urllib.parse import urlsplit

from mailer.clock import Clock
from mailer.errors import mask_url
from mailer.limits.decision import Decision
from mailer.limits.keys import MAX_KEY_LENGTH, KeyHasher, check_key, mail_tag
from mailer.limits.policy import Policy
from mailer.limits.sliding_log import RawDecision, TierSpec
from mailer.limits.stores.base import Backend
from mailer.limits.stores.memory import MemoryBackend

#: The longest ``max_wait`` a booking may reach, in seconds (7 days).
MAX_WAIT = 7 * 86_400.0

_REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel")


class Limiter:
    """Enforces every tier of one :class:`Policy` per key, atomically, on one backend.

    Keys (normally normalised addresses) are hashed with ``secret`` before they reach storage.
    Build with :meth:`from_url`. All methods are thread-safe.
    """

    def __init__(
        self,
        policy: Policy,
        backend: Backend,
        *,
        namespace: str = "mailguard",
        secret: str | bytes | None = None,
    ) -> None:
        if policy.scoped or any(t.kind != "sliding" for t in policy.tiers):
            raise ValueError(
                f"policy {policy}: scopes and fixed/gcra tiers need "
                "mailer.limits.scoped.ScopedLimiter"
            )
        self.policy = policy
        self.backend = backend
        self._hasher = KeyHasher(secret, namespace, policy.name)
        self._tiers = policy.tiers
        self._key = self._hasher.digest if backend.keys_as_digest else self._hasher.storage_key

    @classmethod
    def from_url(
        cls,
        url: str,
        policy: Policy,
        *,
        clock: Clock | None = None,
        namespace: str = "mailguard",
        secret: str | bytes | None = None,
    ) -> Limiter:
        """Build a limiter on ``memory://``, ``redis://``, ``rediss://``, ``unix://``,
        ``redis+cluster://`` or ``redis+sentinel://`` storage (see
        :func:`mailer.limits.stores.redis.client_from_url` for the URL forms).

        ``clock`` returns epoch seconds. The memory backend reads it (default: the system
        clock). The Redis backend reads the server's ``TIME`` unless a clock is given; give one
        only in tests and simulations, since workers' clocks disagree. ``secret`` keys the hash
        of every stored key: set it, the same on every worker.
        """
        if policy.scoped or any(t.kind != "sliding" for t in policy.tiers):
            raise ValueError(
                f"policy {policy}: scopes and fixed/gcra tiers need "
                "mailer.limits.scoped.ScopedLimiter"
            )
        spec = TierSpec([(t.limit, t.window_ms) for t in policy.tiers])
        scheme = urlsplit(url).scheme if isinstance(url, str) else ""
        backend: Backend
        if scheme == "memory":
            backend = MemoryBackend(spec, clock)
        elif scheme in _REDIS_SCHEMES:
            from mailer.limits.stores.redis import RedisBackend  # noqa: PLC0415 - redis is optional here

            backend = RedisBackend(spec, url, clock=clock)
        else:
            raise ValueError(
                f"unsupported limiter URL {mask_url(str(url))!r}: use memory://, redis://, "
                "rediss://, unix://, redis+cluster:// or redis+sentinel://"
            )
        return cls(policy, backend, namespace=namespace, secret=secret)

    def storage_key(self, key: str) -> str:
        """The hashed key under which ``key``'s log is stored (safe to log)."""
        return self._hasher.storage_key(check_key(key))

    def acquire(
        self,
        key: str,
        *,
        mail_id: str | None = None,
        max_wait: float = 0.0,
        not_before: float | None = None,
    ) -> Decision:
        """Admit one mail to ``key`` now, book a later slot, or refuse; atomically over all tiers.

        ``max_wait`` (seconds) > 0 turns on reservations: when the earliest admissible time is
        at most that far away it is booked under ``mail_id`` and returned with ``booked=True``.
        With a ``mail_id`` that already holds an admission or booking, that same slot is
        returned and nothing more is consumed. A refusal consumes nothing. ``not_before``
        (epoch seconds, e.g. the end of a hold after a throttling reply) makes the slot the
        earliest admissible time at or after it: booked (within ``max_wait``), never now.
        Raises ``ValueError`` for a bad key, mail id or max_wait, and
        :class:`mailer.errors.BackendUnavailable` when the storage cannot be reached.
        """
        # The common case (a str key, no mail id, no wait) skips the helper calls: hot path.
        if type(key) is not str or not 0 < len(key) <= MAX_KEY_LENGTH:
            check_key(key)
        tag = 0 if mail_id is None else mail_tag(mail_id)
        wait_ms = 0 if max_wait == 0.0 else _max_wait_ms(max_wait)
        if not_before is not None:
            raw = self.backend.acquire(self._key(key), tag, wait_ms, not_before_ms(not_before))
            return self._decision(raw)
        return self._decision(self.backend.acquire(self._key(key), tag, wait_ms))

    def acquire_many(
        self,
        keys: Sequence[str],
        *,
        mail_ids: Sequence[str | None] | None = None,
        max_wait: float = 0.0,
    ) -> list[Decision]:
        """:meth:`acquire` for many keys in one round trip (one script call); answers in order.

        Each key's decision is atomic on its own; rely on nothing more (on Redis Cluster, and in
        the memory backend, the keys are decided one after the other).
        """
        if mail_ids is not None and len(mail_ids) != len(keys):
            raise ValueError("mail_ids must have one entry per key")
        ids: Sequence[str | None] = mail_ids if mail_ids is not None else [None] * len(keys)
        items = [(self._key(check_key(k)), mail_tag(m)) for k, m in zip(keys, ids, strict=True)]
        return [
            self._decision(raw) for raw in self.backend.acquire_many(items, _max_wait_ms(max_wait))
        ]

    def peek(self, key: str) -> Decision:
        """Answer as :meth:`acquire` would for a fresh mail now, consuming nothing.

        For a web form that wants to say "try again in 42 s" before enqueueing.
        """
        return self._decision(self.backend.peek(self._key(check_key(key))))

    def release(self, key: str, mail_id: str) -> bool:
        """Give back the admission or booking of ``mail_id``; return whether there was one.

        For a mail that failed for good: the recipient should not pay for our failure.
        """
        return self.backend.release(self._key(check_key(key)), mail_tag(mail_id))

    def reset(self, key: str) -> None:
        """Forget every admission and booking of ``key``."""
        self.backend.reset(self._key(check_key(key)))

    def close(self) -> None:
        """Release the backend's connections (memory: forget everything)."""
        self.backend.close()

    def _decision(self, raw: RawDecision) -> Decision:
        tier_index = raw[4]
        return _new_decision(
            (
                raw[0] == 1,
                raw[1] == 1,
                raw[2],
                raw[3],
                self._tiers[tier_index - 1] if tier_index else None,
                raw[5:],
                "recipient" if tier_index else None,
            )
        )


def _new_decision(fields: tuple[object, ...]) -> Decision:
    # tuple.__new__ skips NamedTuple's Python-level __new__: a measurable share of a memory call.
    return tuple.__new__(Decision, fields)


def not_before_ms(not_before: float) -> int:
    """``not_before`` (epoch seconds) as the limiter's whole ms, rounded up (never early).

    Raises ``ValueError`` for a value that is not a finite number of epoch seconds.
    """
    if isinstance(not_before, bool) or not isinstance(not_before, (int, float)):
        raise ValueError(f"not_before must be epoch seconds, got {type(not_before).__name__}")
    if not 0 <= not_before < 1e11:  # also refuses NaN and infinities
        raise ValueError(f"not_before must be epoch seconds, got {not_before!r}")
    return math.ceil(not_before * 1000 - 1e-6)  # 1e-6 ms: float noise, not a real ms


def _max_wait_ms(max_wait: float) -> int:
    if not 0 <= max_wait <= MAX_WAIT:  # also refuses NaN
        raise ValueError(f"max_wait must be between 0 and {MAX_WAIT:.0f} seconds, got {max_wait}")
    return int(max_wait * 1000)
