"""Redis store for a policy of recipient sliding tiers only: one ``EVALSHA`` of
``lua/sliding_log.lua`` per decision, over one key per recipient.

For many worker processes and hosts (Redis, Sentinel or Cluster). The script reads the server's
``TIME`` (one clock for every worker) unless the store was given a clock (tests, simulations).
Every key has a TTL that ends when its newest entry leaves the longest window. Keys are
``<namespace>:{<hash>}``, the hash keyed by the secret and the policy's name.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Sequence
from importlib import resources
from typing import Any

import redis.exceptions

from mailer.clock import Clock, to_us
from mailer.errors import BackendUnavailable
from mailer.limits.decision import Decision, new_decision
from mailer.limits.keys import KeyHasher
from mailer.limits.ordering import ORDER_GRACE_MS
from mailer.limits.policy import Policy, Tier
from mailer.limits.sliding_log import TierSpec
from mailer.limits.stores.server_clock import redis_clock
from mailer.storage import (
    REDIS_DOWN,
    client_from_url,
    is_cluster,
    redis_down_as_unavailable,
    run_script,
)

#: The script's text with the policy markers in place; :func:`compile_script` fills them.
SCRIPT_TEMPLATE = (
    resources.files("mailer.limits.stores").joinpath("lua/sliding_log.lua").read_text()
)
#: The functions of a recipient's booked order (:mod:`mailer.limits.ordering`), compiled into
#: the script at its ``--[[ORDERING]]`` marker.
ORDERING = resources.files("mailer.limits.stores").joinpath("lua/sliding_order.lua").read_text()


def compile_script(policy: Policy) -> tuple[str, str]:
    """Return ``(source, sha1)`` of the script with ``policy``'s recipient tiers compiled in.

    Baking the policy into the script saves sending and parsing it on every call.
    """
    spec = TierSpec([(t.limit, t.window_ms) for t in policy.tiers])
    markers = {
        "--[[LIMITS]]": ", ".join(map(str, spec.limits)),
        "--[[WINDOWS]]": ", ".join(map(str, spec.windows)),
        "--[[MAX_WINDOW]]": str(spec.max_window_ms),
        "--[[ORDER_GRACE]]": str(ORDER_GRACE_MS),
        # the room per tier once a first entry is kept (every limit is at least 1)
        "--[[ROOMS_AFTER_ONE]]": ", ".join(str(limit - 1) for limit in spec.limits),
        "--[[REPLY]]": ">BBI8I8B" + "I4" * len(spec.limits),  # Lua struct: reply_format
        **_unrolled(spec),
    }
    source = SCRIPT_TEMPLATE.replace("--[[ORDERING]]", ORDERING)
    for marker, text in markers.items():
        source = source.replace(marker, text)
    return source, hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis's script name


#: Policies of more tiers keep the quick path's loops (two locals per tier unrolled, and Lua
#: allows a function 200).
UNROLLED_TIERS = 16


def _looped(spec: TierSpec, pad: str) -> dict[str, str]:
    """:func:`_unrolled`'s markers as loops over tables of the policy's numbers."""
    count = len(spec.pairs)
    bind = [
        f"local lims, wins = {{{', '.join(map(str, spec.limits))}}}, "
        f"{{{', '.join(map(str, spec.windows))}}}",
        f"for i = 1, {count} do",
        "  if n >= lims[i] then local c = ts[n - lims[i] + 1] + wins[i]",
        "    if c > bind_t then bind_t, tier = c, i end end",
        "end",
    ]
    rooms = [
        "local rooms = {}",
        f"for i = 1, {count} do",
        "  local low, room = seen - wins[i], lims[i]",
        "  for j = n, 1, -1 do if ts[j] > low then room = room - 1 else break end end",
        "  if room < 0 then room = 0 end",
        "  rooms[i] = room",
        "end",
    ]
    return {
        "--[[BIND]]": ("\n" + pad).join(bind),
        "--[[ROOMS]]": ("\n" + pad).join(rooms),
        "--[[ROOM_VARS]]": f"unpack(rooms, 1, {count})",
    }


def _unrolled(spec: TierSpec) -> dict[str, str]:
    """The quick path's two loops over the tiers, unrolled with the policy's numbers (no table
    of limits or windows built per call: 2 µs of a refused decision's server time, measured).

    ``--[[BIND]]``: the binding tier of the earliest admissible time (``earliest``).
    ``--[[ROOMS]]``: ``r<i>``, tier i's room in the window ending at ``seen`` over the sorted
    ``ts`` (n entries): one pass from the newest entry down to the longest window's start
    (that window holds every other's); ``--[[ROOM_VARS]]`` names them, in order.
    """
    pad, tiers = "    ", list(enumerate(spec.pairs, start=1))
    if len(tiers) > UNROLLED_TIERS:
        return _looped(spec, pad)
    bind = [
        f"if n >= {limit} then local c = ts[n - {limit - 1}] + {window} "
        f"if c > bind_t then bind_t, tier = c, {i} end end"
        for i, (limit, window) in tiers
    ]
    names = [f"r{i}" for i, _ in tiers]
    lows = [f"l{i}" for i, _ in tiers]
    k = 1 + spec.windows.index(spec.max_window_ms)  # the longest window's tier
    rooms = [
        f"local {', '.join(names)} = {', '.join(map(str, spec.limits))}",
        f"local {', '.join(lows)} = {', '.join(f'seen - {w}' for w in spec.windows)}",
        "for j = n, 1, -1 do",
        f"  local x = ts[j] if x <= l{k} then break end r{k} = r{k} - 1",
        *(f"  if x > l{i} then r{i} = r{i} - 1 end" for i, _ in tiers if i != k),
        "end",
        *(f"if r{i} < 0 then r{i} = 0 end" for i, _ in tiers),
    ]
    return {
        "--[[BIND]]": ("\n" + pad).join(bind),
        "--[[ROOMS]]": ("\n" + pad).join(rooms),
        "--[[ROOM_VARS]]": ", ".join(names),
    }


def close_client(client: Any) -> None:
    """Close a redis-py client and, when the sentinels chose its master, their connections."""
    client.close()
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    for sentinel in getattr(manager, "sentinels", ()):
        sentinel.close()


class SlidingRedisStore:
    """Sliding logs in Redis strings, one atomic script call per decision.

    Raises :class:`mailer.errors.BackendUnavailable` when the server cannot be reached.
    A script missing from the server's cache (restart, ``SCRIPT FLUSH``) is loaded again.
    """

    #: Judges a late booked mail itself (``acquire(..., late_ms=)``): see sliding_log._held.
    judges_lateness = True
    #: Keeps a recipient's booked order (``acquire(..., order=)``), the stamps in a hash
    #: ``<key>:o`` beside the log: see mailer.limits.ordering.
    keeps_order = True

    def __init__(
        self,
        policy: Policy,
        url: str,
        *,
        clock: Clock | None = None,
        namespace: str = "mailguard",
        secret: str | bytes | None = None,
        client: Any = None,
    ) -> None:
        self.url = url
        self._hasher = KeyHasher(secret, namespace, policy.name)
        self._tiers = policy.tiers
        self._client = client if client is not None else client_from_url(url)
        # Keys of different subjects may live in different Cluster slots: acquire_many then
        # goes key by key there, and in one multi-key script call elsewhere.
        self._pipelined = not is_cluster(url)
        self._clock = clock
        self._server_clock = redis_clock(self._client, url)
        self.script, self.script_sha = compile_script(policy)
        #: (tier, scope) by the reply's binding-tier index (0: none).
        self._binding = [(None, None), *((t, "recipient") for t in policy.tiers)]
        self._reply = reply_format(len(policy.tiers))

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
        tenant: str | None = None,  # no tenant scope in this shape
        *,
        share: float = 1.0,  # the recipient's own budget: no share
        not_before_ms: int = 0,
        provider: str | None = None,  # no provider scope in this shape
        late_ms: int = -1,
        order: str = "",
    ) -> Decision:
        now = "" if self._clock is None else to_us(self._clock())
        key = self._hasher.storage_key(recipient)
        args: tuple[object, ...]
        if order:
            args = ("a", now, tag, max_wait_ms, not_before_ms, late_ms, order)
        elif late_ms >= 0:
            args = ("a", now, tag, max_wait_ms, not_before_ms, late_ms)
        elif not_before_ms:
            args = ("a", now, tag, max_wait_ms, not_before_ms)
        else:  # the usual call (the script's quick path): no tuple built
            try:  # EVALSHA through execute_command (evalsha's two layers skipped); on the
                # server's clock, the short forms (tag, max_wait; or none) of the arguments
                if now != "":
                    raw = self._client.execute_command(
                        "EVALSHA", self.script_sha, 1, key, "a", now, tag, max_wait_ms
                    )
                elif tag or max_wait_ms:
                    raw = self._client.execute_command(
                        "EVALSHA", self.script_sha, 1, key, tag, max_wait_ms
                    )
                else:  # no mail id, no wait: no argument at all
                    raw = self._client.execute_command("EVALSHA", self.script_sha, 1, key)
            except redis.exceptions.NoScriptError:  # did not run: run_script loads it, runs it
                raw = self._evalsha([key], ["a", now, tag, max_wait_ms])
            except REDIS_DOWN as exc:
                raise BackendUnavailable(self.url, exc) from exc
            fields = self._reply.unpack(raw)
            tier, scope = self._binding[fields[4]]
            return new_decision(
                (fields[0] == 1, fields[1] == 1, fields[2], fields[3], tier, fields[5:], scope)
            )
        return self._decision(self._evalsha([key], list(args)))

    def late_call(
        self, recipient: str, tag: int, max_wait_ms: int, late_ms: int, order: str = ""
    ) -> tuple[str, tuple[object, ...]]:
        """The key and arguments :meth:`acquire` sends with ``late_ms`` (no hold) to run
        :attr:`script`, for a caller that runs that decision inside a script of its own on
        :attr:`client` (the ledger's begin: :mod:`mailer.records.ledger.ride`); answer its
        reply with :meth:`decision_of`. ``order``: the mail's order stamp ("" for none)."""
        now = "" if self._clock is None else to_us(self._clock())
        key = self._hasher.storage_key(recipient)
        if order:
            return key, ("a", now, tag, max_wait_ms, 0, late_ms, order)
        return key, ("a", now, tag, max_wait_ms, 0, late_ms)

    def decision_of(self, raw: bytes) -> Decision:
        """The decision :attr:`script`'s reply says."""
        return self._decision(raw)

    def acquire_many(
        self, recipients: Sequence[str], tags: Sequence[int], max_wait_ms: int
    ) -> list[Decision]:
        """All keys in one script call (one round trip); key by key on Redis Cluster."""
        if not recipients:
            return []
        if not self._pipelined:
            return [
                self.acquire(r, tag, max_wait_ms, None)
                for r, tag in zip(recipients, tags, strict=True)
            ]
        keys = [self._hasher.storage_key(r) for r in recipients]
        args = ["m", "" if self._clock is None else to_us(self._clock()), max_wait_ms, *tags]
        return [self._decision(answer) for answer in self._evalsha(keys, args)]

    def peek(
        self,
        recipient: str,
        tenant: str | None = None,  # no tenant scope in this shape
        *,
        share: float = 1.0,  # the recipient's own budget: no share
        domain: str | None = None,  # no domain scope in this shape
        provider: str | None = None,  # no provider scope in this shape
    ) -> Decision:
        return self._decision(self._call(recipient, "p", 0))

    def release(
        self,
        recipient: str,
        tag: int,
        tenant: str | None,
        provider: str | None = None,  # no provider scope in this shape
    ) -> bool:
        return bool(self._call(recipient, "r", tag))

    def storage_key(self, scope: str, key: str) -> str:
        if scope != "recipient":
            raise ValueError(f"policy {', '.join(map(str, self._tiers))} has no scope {scope!r}")
        return self._hasher.storage_key(key)

    def reset(self, recipient: str | None) -> None:
        if recipient is None:
            raise ValueError(
                "a Redis limiter forgets one recipient at a time (its storage is shared): "
                "give a recipient"
            )
        key = self._hasher.storage_key(recipient)
        with redis_down_as_unavailable(self.url):
            self._client.delete(key, key + ":o")

    def close(self) -> None:
        close_client(self._client)

    def _call(self, recipient: str, mode: str, tag: int) -> Any:
        now = "" if self._clock is None else to_us(self._clock())
        return self._evalsha([self._hasher.storage_key(recipient)], [mode, now, tag, 0])

    def _evalsha(self, keys: list[str], args: list[Any]) -> Any:
        return run_script(self._client, (self.script, self.script_sha), keys, args, self.url)

    def _decision(self, raw: bytes) -> Decision:
        return sliding_decision(raw, self._tiers)


@functools.cache
def reply_format(tiers: int) -> struct.Struct:
    """The binary reply of ``sliding_log.lua`` for a policy of ``tiers`` tiers (its REPLY)."""
    return struct.Struct(">BBQQB" + "I" * tiers)


def sliding_decision(raw: bytes, tiers: Sequence[Tier]) -> Decision:
    """The decision a sliding-log reply says (allowed, booked, ``at_ms``, ``wait_ms``, tier,
    then the room per tier: :func:`reply_format`), ``tiers`` the policy's recipient tiers."""
    fields = reply_format(len(tiers)).unpack(raw)
    index = fields[4]
    tier = tiers[index - 1] if index else None
    scope = "recipient" if index else None
    return new_decision(
        (fields[0] == 1, fields[1] == 1, fields[2], fields[3], tier, fields[5:], scope)
    )
