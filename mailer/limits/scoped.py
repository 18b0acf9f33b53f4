"""One decision over every scope of a policy: recipient, domain, sender and tenant, all tiers.

>>> from mailer import ManualClock, Policy
>>> clock = ManualClock(1_000.0)
>>> limiter = ScopedLimiter(Policy.parse("recipient: 1/1s; sender: 2/1s gcra"), clock=clock)
>>> limiter.acquire("ada@example.com").allowed, limiter.acquire("bob@example.com").allowed
(True, True)
>>> d = limiter.acquire("cy@example.com"); d.allowed, d.retry_after, d.scope, str(d.tier)
(False, 0.5, 'sender', '2/1s gcra')

A mail is admitted only when every tier of every scope it has a key in admits it; a refusal
consumes nothing anywhere; a booking books one slot, the earliest time every scope admits, in
all of them. The recipient's sliding log always keeps the mail's tag and slot, so the same mail
id gets its slot back and ``release`` knows which window or bucket to give it back to.

Tier kinds, per scope key (times in ms, GCRA state in µs):

- ``sliding``: the exact log of :mod:`mailer.limits.sliding_log`; appending at ``x`` keeps tier
  ``(L, W)`` iff ``n < L`` or ``ts[n-L] <= x - W``. In the shared scopes a mail is inserted
  instead, before bookings already made when it fits (:mod:`mailer.limits.insertion`): shares then
  leave room for a code mail in every window, bookings included.
- ``fixed``: a count per calendar window (:mod:`mailer.limits.windows`); ``x`` fits iff the window
  holding ``x`` has fewer than ``L`` admissions, else the earliest is the next window's start.
- ``gcra``: emission interval ``T = ceil(W/L)`` µs (rounded up: never faster than the
  policy); the bucket's arrival time over every emission up to now (one timestamp) plus the
  emissions booked after now, so a mail may be inserted before bookings, as in the shared
  sliding tiers (:mod:`mailer.limits.gcra_log`). Without bookings: redis-cell's GCRA, ``x`` fits iff
  ``tat - x <= (L-1)·T``.

Never early: the decision compares with now rounded *down* to the ms and stores an admission
made now at now rounded *up*, so no admission is earlier than the policy allows, even by a
microsecond. Kind shares: in the shared scopes (domain, sender, tenant) a kind with share
``s < 1`` sees each tier's limit as ``max(1, floor(s·L))`` (a gcra tier: also its rate), so the
rest stays free for kinds with a larger share (``code`` keeps 1.0).
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from mailer.clock import Clock, system_clock
from mailer.limits.decision import Decision
from mailer.limits.gcra_log import (
    GcraLog,
    expires_us,
    fold,
    give_back,
    insert,
    interval_us,
    share_floor,
    used,
)
from mailer.limits.gcra_log import earliest as gcra_earliest
from mailer.limits.insertion import earliest_insert_now, window_max
from mailer.limits.keys import KeyHasher, check_key, mail_tag
from mailer.limits.limiter import MAX_WAIT, not_before_ms
from mailer.limits.policy import Policy, Tier
from mailer.limits.stores.scoped_redis import month_starts
from mailer.limits.windows import offset_ms, window, zone

if TYPE_CHECKING:
    from mailer.limits.stores.scoped_cluster import ClusterDecider
    from mailer.limits.stores.scoped_redis import ScopedRedisStore

#: The scopes a kind's share applies to (the recipient's own budget is not shared).
SHARED_SCOPES = ("domain", "sender", "tenant")
#: The longest tenant name, in characters.
MAX_TENANT_LENGTH = 64
#: How many storage keys of shared subjects a limiter memoises per scope.
_MEMO_KEYS = 4096
#: The sender scope's one subject: every worker and host shares it.
SENDER_KEY = "sender"
#: The recipient :meth:`ScopedLimiter.room` asks about a shared scope with: one no mail goes
#: to (``.invalid`` is reserved, RFC 2606), so its own scopes are empty.
STATUS_RECIPIENT = "room@mailguard.invalid"


def check_tenant(tenant: object) -> str | None:
    """Return ``tenant`` if it is None or 1-64 characters without control characters.

    Raises ``ValueError`` saying why otherwise (for ``send_mail.delay(..., tenant=...)``).
    """
    if tenant is None:
        return None
    if not isinstance(tenant, str) or not 1 <= len(tenant) <= MAX_TENANT_LENGTH:
        raise ValueError(f"tenant must be a str of 1 to {MAX_TENANT_LENGTH} characters")
    if tenant.isascii() and tenant.isprintable():
        return tenant  # the common case, without a loop over the characters
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in tenant):
        raise ValueError("tenant must not contain control characters")
    return tenant


def share_limit(limit: int, share: float) -> int:
    """The part of ``limit`` a kind with ``share`` in (0, 1] may fill: floor, at least 1."""
    return max(1, math.floor(limit * share + 1e-9))


def check_share(share: object) -> float:
    """Return ``share`` if it is a number in (0, 1], else raise ``ValueError`` saying so."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise ValueError(f"share must be a number in (0, 1], got {share!r}")
    return float(share)


@dataclass
class ScopeState:
    """What one scope key holds: a sliding log, a bucket per gcra tier, counts per fixed window."""

    ts: list[int] = field(default_factory=list)
    tags: list[int] = field(default_factory=list)
    gcra: dict[int, GcraLog] = field(default_factory=dict)  # tier index -> its bucket
    counts: dict[tuple[int, int], int] = field(default_factory=dict)  # (tier index, start) -> n
    expires_ms: int = 0


class _Scope:
    """A scope of a policy with its tiers and the numbers the decision needs."""

    __slots__ = ("digit", "hasher", "keep_ms", "keys", "name", "tiers")

    def __init__(self, name: str, tiers: tuple[Tier, ...], hasher: KeyHasher) -> None:
        self.name = name
        self.tiers = tiers
        self.hasher = hasher
        # How long an entry matters: the longest window (a recipient log without tiers of its
        # own keeps tags as long as any scope's window, for idempotency and release).
        self.keep_ms = max((t.window_ms for t in tiers), default=0)
        self.digit = ""  # its 1-based index among the policy's scopes, for the Redis script
        # Storage keys of shared subjects (the sender, a few tenants and domains), memoised.
        self.keys: dict[str, str] = {}


class ScopedLimiter:
    """Enforces every scope of one :class:`Policy` atomically, in this process.

    The in-process store (one lock over a dict of :class:`ScopeState`): tests, simulations,
    the demo, a threads or solo pool. ``clock`` returns epoch seconds. ``tz`` aligns ``fixed``
    windows (an IANA name, default UTC). Thread-safe.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        url: str = "memory://",
        clock: Clock | None = None,
        namespace: str = "mailguard",
        secret: str | bytes | None = None,
        tz: str = "UTC",
    ) -> None:
        self.policy = policy
        self._clock = clock or system_clock
        self._tz: timezone | ZoneInfo = zone(tz)
        longest = max(t.window_ms for _, tiers in policy.scope_tiers() for t in tiers)
        self._scopes: list[_Scope] = []
        for name in ("recipient", "domain", "sender", "tenant"):
            tiers = dict(policy.scope_tiers()).get(name, ())
            if tiers or name == "recipient":
                hasher = KeyHasher(secret, namespace, f"{policy.name}.{name}")
                self._scopes.append(_Scope(name, tiers, hasher))
        self._scopes[0].keep_ms = max(self._scopes[0].keep_ms, longest)
        for index, scope in enumerate(self._scopes, start=1):
            scope.digit = str(index)
        self._states: dict[tuple[str, bytes], ScopeState] = {}
        self._lock = threading.Lock()
        self._calls = 0
        self._given_clock = clock
        self._redis: ScopedRedisStore | None = None
        self._cluster: ClusterDecider | None = None
        self._month_tiers = [t for _, tiers in policy.scope_tiers() for t in tiers if t.months]
        scheme = urlsplit(url).scheme
        if scheme != "memory":
            from mailer.limits.stores.scoped_cluster import ClusterDecider  # noqa: PLC0415
            from mailer.limits.stores.scoped_redis import ScopedRedisStore  # noqa: PLC0415 - optional

            self._redis = ScopedRedisStore(
                url,
                [(s.keep_ms, s.name in SHARED_SCOPES, _has_log(s), s.tiers) for s in self._scopes],
            )
            if scheme.endswith("+cluster") and len(self._scopes) > 1:
                self._cluster = ClusterDecider(self._redis.call, url)
        self.url = url

    def close(self) -> None:
        """Release the Redis connections (memory: forget everything)."""
        if self._redis is not None:
            self._redis.close()
        self.reset()

    def storage_key(self, scope: str, key: str) -> str:
        """The hashed key under which ``key``'s state in ``scope`` is stored (safe to log)."""
        for s in self._scopes:
            if s.name == scope:
                return s.hasher.storage_key(check_key(key))
        raise ValueError(f"policy {self.policy} has no scope {scope!r}")

    # -- the public operations ---------------------------------------------------------------

    def acquire(
        self,
        recipient: str,
        *,
        domain: str | None = None,
        tenant: str | None = None,
        mail_id: str | None = None,
        max_wait: float = 0.0,
        share: float = 1.0,
        not_before: float | None = None,
    ) -> Decision:
        """Admit one mail now, book the earliest slot every scope admits, or refuse.

        ``domain`` defaults to the part of ``recipient`` after its last ``@``; a mail without a
        ``tenant`` is not counted in any tenant. ``max_wait`` (seconds) > 0 books a slot at
        most that far away. ``share`` in (0, 1] caps this mail's kind in the shared scopes.
        ``not_before`` (epoch seconds, a hold's end) makes the slot the earliest time at or
        after it that every scope admits. ``Decision.scope`` and ``.tier`` name the binding
        scope and tier.
        """
        tag = 0 if mail_id is None else mail_tag(mail_id)
        wait_ms = _max_wait_ms(max_wait)
        share = check_share(share)
        nb = 0 if not_before is None else not_before_ms(not_before)
        if tenant is not None:
            check_tenant(tenant)
        if self._redis is not None:
            remote: Decision = self._remote(
                "a", recipient, domain, tenant, tag, wait_ms, share, not_before=nb
            )
            return remote
        keys = self._keys(recipient, domain, tenant)
        with self._lock:
            now_us = round(self._clock() * 1_000_000)
            states = self._load(keys, now_us)
            decision = self._acquire(states, now_us, tag, wait_ms, share, not_before=nb)
            if decision.refused:  # a refusal leaves nothing behind, not even an empty state
                for (_, key), (_, state) in zip(keys, states, strict=True):
                    if state is not None and not (state.ts or state.gcra or state.counts):
                        del self._states[key]
            return decision

    def peek(
        self,
        recipient: str,
        *,
        domain: str | None = None,
        tenant: str | None = None,
        share: float = 1.0,
    ) -> Decision:
        """Answer as :meth:`acquire` would for a fresh mail now, consuming nothing."""
        share = check_share(share)
        if self._redis is not None:
            remote: Decision = self._remote("p", recipient, domain, tenant, 0, 0, share)
            return remote
        keys = self._keys(recipient, domain, tenant)
        with self._lock:
            now_us = round(self._clock() * 1_000_000)
            states = self._load(keys, now_us, create=False)
            return self._decide(states, now_us, 0, 0, share, record=False)

    def room(self, scope: str, key: str) -> tuple[tuple[Tier, int], ...]:
        """Per tier of ``scope``, how many more admissions ``key`` has room for now.

        ``key`` is the scope's subject: an address (``recipient``), a domain, ``sender``, or a
        tenant's name. Read with :meth:`peek` (memory or Redis alike): nothing is consumed.
        """
        target = next((s for s in self._scopes if s.name == scope), None)
        if target is None:
            raise ValueError(f"policy {self.policy} has no scope {scope!r}")
        recipient = key if scope == "recipient" else STATUS_RECIPIENT
        domain = key if scope == "domain" else None
        tenant = key if scope == "tenant" else None
        remaining = self.peek(recipient, domain=domain, tenant=tenant).remaining
        offset = 0
        for s in self._scopes:
            if s is target:
                return tuple(zip(s.tiers, remaining[offset : offset + len(s.tiers)], strict=True))
            if s.name != "tenant" or tenant is not None:  # no tenant: its tiers are not asked
                offset += len(s.tiers)
        raise AssertionError("unreachable: the target scope is one of the policy's")

    def release(
        self, recipient: str, mail_id: str, *, domain: str | None = None, tenant: str | None = None
    ) -> bool:
        """Give ``mail_id``'s admission or booking back in every scope; whether there was one."""
        tag = mail_tag(mail_id)
        if self._redis is not None:
            return bool(self._remote("r", recipient, domain, tenant, tag, 0, 1.0))
        keys = self._keys(recipient, domain, tenant)
        with self._lock:
            now_us = round(self._clock() * 1_000_000)
            states = self._load(keys, now_us, create=False)
            head = states[0][1]
            if head is None or tag not in head.tags:
                return False
            at = head.ts[head.tags.index(tag)]
            for scope, state in states:
                if state is not None:
                    self._give_back(scope, state, tag, at, now_us)
            return True

    def reset(self) -> None:
        """Forget everything (every scope, every key)."""
        with self._lock:
            self._states.clear()

    # -- Redis: one script call ---------------------------------------------------------------

    def _remote(  # noqa: PLR0917 - one call's inputs
        self,
        mode: str,
        recipient: str,
        domain: str | None,
        tenant: str | None,
        tag: int,
        wait_ms: int,
        share: float,
        *,
        not_before: int = 0,
    ) -> Any:
        assert self._redis is not None
        keys, digits, present = self._remote_keys(recipient, domain, tenant)
        seconds = self._given_clock() if self._given_clock else None
        offset = (
            0
            if self._tz is timezone.utc
            else offset_ms(self._tz, seconds if seconds is not None else system_clock())
        )
        args = [
            mode,
            "" if seconds is None else round(seconds * 1_000_000),
            tag,
            wait_ms,
            "1" if share == 1.0 else repr(share),
            offset,
            digits,
        ]
        months = ""
        if self._month_tiers:
            now_ms = round((seconds if seconds is not None else system_clock()) * 1000)
            months = month_starts(self._month_tiers, now_ms, self._tz)
        if self._cluster is not None and len(present) > 1:
            return self._on_cluster(args, keys, present, not_before, months)
        if months:
            args += [not_before, "", months]
        elif not_before:
            args.append(not_before)
        raw = self._redis.call(keys, args)
        if mode == "r":
            return raw
        if raw[4]:
            scope = present[raw[4] - 1]
            tier: Tier | None = scope.tiers[raw[5] - 1]
            name: str | None = scope.name
        else:
            tier = name = None
        # tuple.__new__ skips NamedTuple's Python-level __new__ (hot path, as in Limiter).
        fields = (raw[0] == 1, raw[1] == 1, raw[2], raw[3], tier, tuple(raw[6:]), name)
        return tuple.__new__(Decision, fields)

    def _on_cluster(
        self,
        args: list[Any],
        keys: list[str],
        present: list[_Scope],
        not_before: int,
        months: str,
    ) -> Any:
        """:meth:`_remote` on Redis Cluster: scope by scope (:mod:`mailer.limits.stores.
        scoped_cluster`), on one clock read from the cluster (or the given one)."""
        assert self._cluster is not None and self._redis is not None
        mode, given, tag, wait_ms, share, offset = args[:6]
        clock = str(given) if given != "" else f"t{self._cluster_now_us()}"
        scopes = [(key, scope.digit) for key, scope in zip(keys, present, strict=True)]
        if mode == "r":
            return int(self._cluster.release(scopes, clock, tag, offset, months))
        if mode == "p":
            replies, bind = self._cluster.peek(scopes, clock, share, offset, months)
        else:
            replies, bind = self._cluster.acquire(
                scopes,
                clock,
                tag=tag,
                wait_ms=wait_ms,
                share=share,
                offset=offset,
                not_before=not_before,
                months=months,
            )
        last = replies[-1]
        remaining = tuple(value for raw in replies for value in raw[6:])
        now = int(clock.lstrip("t")) // 1000
        if not last[0] and not last[1]:  # refused (peek: not now): the last scope says when
            allowed = booked = False
            at = int(last[2])
            wait = at - now
        else:
            allowed = all(raw[0] == 1 for raw in replies)
            booked = not allowed
            at = max(int(raw[2]) for raw in replies)
            wait = 0 if allowed else at - now
        if bind is not None and not allowed:
            scope = present[bind[0]]
            tier: Tier | None = scope.tiers[bind[1] - 1]
            name: str | None = scope.name
        else:
            tier = name = None
        return Decision(allowed, booked, at, wait, tier, remaining, name)

    def _cluster_now_us(self) -> int:
        """The cluster's clock in µs (``TIME`` of one node: every node's on one host)."""
        assert self._redis is not None
        seconds, micros = self._redis.time()
        return int(seconds) * 1_000_000 + int(micros)

    def _remote_keys(
        self, recipient: str, domain: str | None, tenant: str | None
    ) -> tuple[list[str], str, list[_Scope]]:
        """The storage keys of the scopes this mail has a subject in, their digits, the scopes."""
        check_key(recipient)
        keys: list[str] = []
        digits = ""
        present: list[_Scope] = []
        for scope in self._scopes:
            name = scope.name
            if name == "recipient":
                key = scope.hasher.storage_key(recipient)
            else:
                if name == "sender":
                    subject: str | None = SENDER_KEY
                elif name == "tenant":
                    subject = tenant
                else:
                    subject = domain if domain is not None else recipient.rpartition("@")[2]
                if not subject:
                    continue
                found = scope.keys.get(subject)
                if found is None:
                    found = scope.hasher.storage_key(check_key(subject))
                    if len(scope.keys) < _MEMO_KEYS:
                        scope.keys[subject] = found
                key = found
            keys.append(key)
            digits += scope.digit
            present.append(scope)
        return keys, digits, present

    # -- the decision ------------------------------------------------------------------------

    def _keys(
        self, recipient: str, domain: str | None, tenant: str | None
    ) -> list[tuple[_Scope, tuple[str, bytes]]]:
        check_key(recipient)
        subjects = {
            "recipient": recipient,
            "domain": domain if domain is not None else recipient.rpartition("@")[2],
            "sender": SENDER_KEY,
            "tenant": tenant,
        }
        out = []
        for scope in self._scopes:
            subject = subjects[scope.name]
            if subject is not None and subject != "":
                out.append((scope, (scope.name, scope.hasher.digest(check_key(subject)))))
        return out

    def _load(
        self, keys: list[tuple[_Scope, tuple[str, bytes]]], now_us: int, *, create: bool = True
    ) -> list[tuple[_Scope, ScopeState | None]]:
        self._calls += 1
        if self._calls % 64 == 0:
            self._evict(now_us // 1000)
        out: list[tuple[_Scope, ScopeState | None]] = []
        for scope, key in keys:
            state = self._states.get(key)
            if state is None and create:
                state = self._states[key] = ScopeState()
            if state is not None:
                self._prune(scope, state, now_us)
            out.append((scope, state))
        return out

    def _evict(self, now_ms: int) -> None:
        for key in [k for k, s in self._states.items() if s.expires_ms <= now_ms]:
            del self._states[key]

    def _acquire(
        self,
        states: list[tuple[_Scope, ScopeState | None]],
        now_us: int,
        tag: int,
        wait_ms: int,
        share: float,
        *,
        not_before: int = 0,
    ) -> Decision:
        head = states[0][1]
        if tag and head is not None and tag in head.tags:
            at = head.ts[head.tags.index(tag)]
            allowed = at <= -(-now_us // 1000)  # admitted now: stored at now rounded up
            return self._answer(states, now_us, allowed, not allowed, at, None, share)
        return self._decide(states, now_us, tag, wait_ms, share, record=True, not_before=not_before)

    def _decide(
        self,
        states: list[tuple[_Scope, ScopeState | None]],
        now_us: int,
        tag: int,
        wait_ms: int,
        share: float,
        *,
        record: bool,
        not_before: int = 0,
    ) -> Decision:
        now = now_us // 1000
        # The earliest time every tier of every scope admits: raise t until all agree.
        t, hi = now, -(-now_us // 1000)
        for scope, state in states:  # entries up to now rounded up do not delay a mail now
            if scope.name in SHARED_SCOPES:
                continue  # shared logs take mails by insertion (mailer.limits.insertion): no order
            if state is not None and state.ts and state.ts[-1] > max(t, hi):
                t = state.ts[-1]
        t = max(t, not_before)  # a hold's end (epoch ms; 0: none)
        bind: tuple[_Scope, Tier] | None = None
        moved = True
        while moved:
            moved = False
            for scope, state in states:
                for i, tier in enumerate(scope.tiers):
                    fit = self._tier_earliest(scope, i, state, t, share, now_us)
                    if fit > t:
                        t, moved, bind = fit, True, (scope, tier)
        allowed = t == now
        booked = not allowed and record and t - now <= wait_ms
        if allowed and record:
            for scope, state in states:
                assert state is not None
                self._record(scope, state, tag, now_us, -(-now_us // 1000), now, now_us=now_us)
        elif booked:
            for scope, state in states:
                assert state is not None
                self._record(scope, state, tag, t * 1000, t, t, now_us=now_us)
        return self._answer(states, now_us, allowed, booked, t, None if allowed else bind, share)

    def _tier_earliest(  # noqa: PLR0911, PLR0917 - one return per tier kind
        self, scope: _Scope, i: int, state: ScopeState | None, t: int, share: float, now_us: int
    ) -> int:
        """Earliest ms >= ``t`` at which tier ``i`` of ``scope`` admits one more.

        The recipient's sliding tiers append; the shared scopes' insert
        (:mod:`mailer.limits.insertion`).
        A gcra tier compares an admission now with the real time ``now_us`` (µs), so a burst
        within one ms is not delayed by the ms rounding.
        """
        tier = scope.tiers[i]
        limit = share_limit(tier.limit, share) if scope.name in SHARED_SCOPES else tier.limit
        if state is None:
            return t
        if tier.kind == "sliding":
            if scope.name in SHARED_SCOPES:
                now = now_us // 1000
                hi = -(-now_us // 1000)
                return earliest_insert_now(state.ts, limit, tier.window_ms, t, now=now, hi=hi)
            n = len(state.ts)
            if n >= limit:
                return max(t, state.ts[n - limit] + tier.window_ms)
            return t
        if tier.kind == "gcra":
            log = state.gcra.get(i)
            if log is None:
                return t
            return _gcra_earliest(log, tier, limit, t, now_us)
        while True:  # fixed: the first window from t's with room
            start, end = window(t, tier, self._tz)
            if state.counts.get((i, start), 0) < limit:
                return t
            t = end

    def _room(  # noqa: PLR0917 - one tier's question at one time
        self,
        scope: _Scope,
        i: int,
        state: ScopeState,
        at: int,
        at_us: int,
        share: float,
        now_us: int,
    ) -> int:
        tier = scope.tiers[i]
        limit = share_limit(tier.limit, share) if scope.name in SHARED_SCOPES else tier.limit
        if tier.kind == "sliding" and scope.name in SHARED_SCOPES:
            count = window_max(state.ts, at, tier.window_ms)
        elif tier.kind == "sliding":
            count = len(state.ts) - bisect_right(state.ts, at - tier.window_ms)
        elif tier.kind == "gcra":
            log = state.gcra.get(i)
            if log is None:
                return limit
            full_us = interval_us(tier.limit, tier.window_ms)
            full = tier.limit - used(log.floor, log.times, full_us, at_us)
            if limit == tier.limit:
                return max(0, full)
            part_us = interval_us(limit, tier.window_ms)  # a share: its own, smaller bucket
            base = share_floor(log.floor, now_us, full_us, part_us)
            part = limit - used(base, log.times, part_us, at_us)
            return max(0, min(full, part))
        else:
            count = state.counts.get((i, window(at, tier, self._tz)[0]), 0)
        return max(0, limit - count)

    def _answer(  # noqa: PLR0917
        self,
        states: list[tuple[_Scope, ScopeState | None]],
        now_us: int,
        allowed: bool,
        booked: bool,
        at: int,
        bind: tuple[_Scope, Tier] | None,
        share: float,
    ) -> Decision:
        now = now_us // 1000
        seen, seen_us = (at, at * 1000) if booked else (now, now_us)
        remaining = []
        for scope, state in states:
            for i in range(len(scope.tiers)):
                room = self._room(scope, i, state or ScopeState(), seen, seen_us, share, now_us)
                remaining.append(room)
        at_ms = at
        return Decision(
            allowed,
            booked,
            at_ms,
            0 if allowed else max(0, at_ms - now),
            bind[1] if bind else None,
            tuple(remaining),
            bind[0].name if bind else None,
        )

    def _record(  # noqa: PLR0917 - one admission's coordinates
        self,
        scope: _Scope,
        state: ScopeState,
        tag: int,
        x_us: int,
        x_ms: int,
        win_ms: int,
        *,
        now_us: int,
    ) -> None:
        """Record one admission at ``x_us`` (µs); ``x_ms`` is its stored ms (rounded up) and
        ``win_ms`` the ms whose calendar window counts it."""
        if _has_log(scope):  # in order: a shared log may hold later bookings
            at = bisect_right(state.ts, x_ms)
            state.ts.insert(at, x_ms)
            state.tags.insert(at, tag)
        expires = x_ms + scope.keep_ms
        for i, tier in enumerate(scope.tiers):
            if tier.kind == "gcra":
                log = state.gcra.setdefault(i, GcraLog())
                interval = interval_us(tier.limit, tier.window_ms)
                insert(log, x_us, tag, now_us, interval)
                until = expires_us(log, interval)
                expires = max(expires, -(-until // 1000))
            elif tier.kind == "fixed":
                start, end = window(win_ms, tier, self._tz)
                state.counts[(i, start)] = state.counts.get((i, start), 0) + 1
                expires = max(expires, end)
        state.expires_ms = max(state.expires_ms, expires)

    def _prune(self, scope: _Scope, state: ScopeState, now_us: int) -> None:
        """Forget what no window ending at or after now can see; fold past gcra emissions."""
        now_ms = now_us // 1000
        if state.ts:
            cut = bisect_right(state.ts, now_ms - scope.keep_ms)
            if cut:
                del state.ts[:cut]
                del state.tags[:cut]
        for i, log in list(state.gcra.items()):
            tier = scope.tiers[i]
            fold(log, now_us, interval_us(tier.limit, tier.window_ms))
            if not log.floor and not log.times:
                del state.gcra[i]
        for index, start in list(state.counts):
            if window(start, scope.tiers[index], self._tz)[1] <= now_ms:
                del state.counts[(index, start)]

    def _give_back(self, scope: _Scope, state: ScopeState, tag: int, at: int, now_us: int) -> None:
        for j in range(len(state.ts) - 1, -1, -1):  # this mail's entry: its tag at its slot
            if state.tags[j] == tag and state.ts[j] == at:
                del state.ts[j]
                del state.tags[j]
                break
        for i, tier in enumerate(scope.tiers):
            if tier.kind == "gcra" and i in state.gcra:
                # Listed (after now), or the floor's last when it alone made the floor.
                give_back(state.gcra[i], tag, at, interval_us(tier.limit, tier.window_ms))
            elif tier.kind == "fixed":
                # A slot stored at a window's very start may have been admitted in the last ms
                # of the window before (stored rounded up): give back nothing rather than guess.
                start = window(at, tier, self._tz)[0]
                if start != at and state.counts.get((i, start), 0) > 0:
                    state.counts[(i, start)] -= 1


def _gcra_earliest(log: GcraLog, tier: Tier, limit: int, t: int, now_us: int) -> int:
    """Earliest ms >= ``t`` at which gcra ``tier`` admits one more: the full tier, and with a
    share (``limit`` below the tier's) a bucket of that limit (:mod:`mailer.limits.gcra_log`)."""
    now = now_us // 1000
    full = interval_us(tier.limit, tier.window_ms)
    if limit == tier.limit:
        return gcra_earliest(log.floor, log.times, tier.limit, full, t, now, now_us)
    part = interval_us(limit, tier.window_ms)
    base = share_floor(log.floor, now_us, full, part)
    while True:
        x = gcra_earliest(log.floor, log.times, tier.limit, full, t, now, now_us)
        y = gcra_earliest(base, log.times, limit, part, x, now, now_us)
        if y == x:
            return x
        t = y


def _has_log(scope: _Scope) -> bool:
    """Whether ``scope`` keeps a log: the recipient's always (tags), others for sliding tiers."""
    return scope.name == "recipient" or any(t.kind == "sliding" for t in scope.tiers)


def _max_wait_ms(max_wait: float) -> int:
    if not 0 <= max_wait <= MAX_WAIT:  # also refuses NaN
        raise ValueError(f"max_wait must be between 0 and {MAX_WAIT:.0f} seconds, got {max_wait}")
    return int(max_wait * 1000)
