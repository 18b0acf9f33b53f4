"""Redis storage for the scoped limiter: one ``EVALSHA`` of ``lua/scoped.lua`` per decision.

Every scope the mail has a key in is decided in the one script call (one Redis, or Sentinel's
master); on Redis Cluster, scope by scope (:mod:`mailer.limits.stores.scoped_cluster`). The
policy is compiled into the script. Fixed windows align to the time zone's offset from UTC at
the time of the call (a window spanning a daylight-saving change is off by that change on
Redis); calendar-month (``mo``) windows are computed here, in the time zone, and handed to the
script with each call (:func:`month_starts`; Lua has no calendar).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import timezone
from importlib import resources
from typing import Any
from zoneinfo import ZoneInfo

import redis.exceptions

from mailer.errors import BackendUnavailable
from mailer.limits.policy import MONTH_MS, Tier
from mailer.limits.stores.redis_errors import REDIS_DOWN
from mailer.limits.windows import window
from mailer.storage import client_from_url

_TEMPLATE = resources.files("mailer.limits.stores").joinpath("lua/scoped.lua").read_text()
_KIND = {"sliding": 1, "fixed": 2, "gcra": 3}


def compile_scoped(scopes: list[tuple[int, bool, bool, tuple[Tier, ...]]]) -> tuple[str, str]:
    """Return ``(source, sha1)`` of the script with these ``(keep_ms, shared, has_log, tiers)``."""
    entries = []
    for keep_ms, shared, has_log, tiers in scopes:
        body = ", ".join(
            f"{{{_KIND[t.kind]}, {t.limit}, {t.window_ms}, "
            f"{-(-t.window_ms * 1000 // t.limit)}, {t.months}}}"
            for t in tiers
        )
        entries.append(f"{{{keep_ms}, {int(shared)}, {int(has_log)}, {{{body}}}}}")
    source = _TEMPLATE.replace("--[[SCOPES]]", ", ".join(entries))
    return source, hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis's script name


def month_starts(tiers: Iterable[Tier], now_ms: int, tz: timezone | ZoneInfo) -> str:
    """``ARGV[10]``: for each month count N of ``tiers``' calendar-month tiers, the starts (epoch
    ms) of its windows from two before the one holding ``now_ms`` to four after (bookings reach
    at most 7 days ahead), as ``"N=b1,b2,...;M=..."``; "" without such tiers."""
    parts = []
    for months in sorted({t.months for t in tiers if t.months}):
        tier = Tier(1, months * MONTH_MS, "fixed", months)
        start, _ = window(now_ms, tier, tz)
        starts = [start]
        for _ in range(2):
            starts.insert(0, window(starts[0] - 1, tier, tz)[0])
        for _ in range(4):
            starts.append(window(starts[-1], tier, tz)[1])
        parts.append(f"{months}=" + ",".join(str(b) for b in starts))
    return ";".join(parts)


class ScopedRedisStore:
    """Runs the compiled scoped script; raises :class:`BackendUnavailable` when Redis is down."""

    def __init__(
        self,
        url: str,
        scopes: list[tuple[int, bool, bool, tuple[Tier, ...]]],
        *,
        client: Any = None,
    ) -> None:
        self.url = url
        self.client = client if client is not None else client_from_url(url)
        self.script, self.sha = compile_scoped(scopes)

    def call(self, keys: list[str], args: list[Any]) -> Any:
        """One script call: ``keys`` the present scopes' base keys, ``args`` ARGV."""
        try:
            try:
                return self.client.evalsha(self.sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                self.client.script_load(self.script)
                return self.client.evalsha(self.sha, len(keys), *keys, *args)
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self.url, exc) from exc

    def time(self) -> tuple[int, int]:
        """The server's ``TIME``: seconds and microseconds (on a Cluster, one node's)."""
        try:
            seconds, micros = self.client.time()
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self.url, exc) from exc
        return int(seconds), int(micros)

    def close(self) -> None:
        """Release the client's connections."""
        self.client.close()
