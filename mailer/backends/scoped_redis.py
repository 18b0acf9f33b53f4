"""Redis storage for the scoped limiter: one ``EVALSHA`` of ``lua/scoped.lua`` per decision.

Every scope the mail has a key in is decided in the one script call (one Redis, or Sentinel's
master). The policy is compiled into the script. Calendar-month (``mo``) tiers are in-process
only for now: a policy with one is refused here. Fixed windows align to the time zone's offset
from UTC at the time of the call (a window spanning a daylight-saving change is off by that
change on Redis).
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

import redis.exceptions

from mailer.backends.redis import client_from_url
from mailer.backends.redis_errors import REDIS_DOWN
from mailer.errors import BackendUnavailable
from mailer.policy import Tier

_TEMPLATE = resources.files("mailer.backends").joinpath("lua/scoped.lua").read_text()
_KIND = {"sliding": 1, "fixed": 2, "gcra": 3}


def compile_scoped(scopes: list[tuple[int, bool, bool, tuple[Tier, ...]]]) -> tuple[str, str]:
    """Return ``(source, sha1)`` of the script with these ``(keep_ms, shared, has_log, tiers)``."""
    entries = []
    for keep_ms, shared, has_log, tiers in scopes:
        for tier in tiers:
            if tier.months:
                raise ValueError(f"tier {tier}: calendar-month tiers need a memory:// limiter")
        body = ", ".join(
            f"{{{_KIND[t.kind]}, {t.limit}, {t.window_ms}, {-(-t.window_ms * 1000 // t.limit)}}}"
            for t in tiers
        )
        entries.append(f"{{{keep_ms}, {int(shared)}, {int(has_log)}, {{{body}}}}}")
    source = _TEMPLATE.replace("--[[SCOPES]]", ", ".join(entries))
    return source, hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis's script name


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

    def close(self) -> None:
        """Release the client's connections."""
        self.client.close()
