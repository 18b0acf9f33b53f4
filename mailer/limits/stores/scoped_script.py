"""The scoped Lua script (``lua/scoped.lua``) compiled for one policy, and what each call sends
and gets back: shared by the blocking store (:mod:`~mailer.limits.stores.scoped_redis`) and the
asyncio limiter (:mod:`mailer.limits.aio`). No I/O here.

``lua/scoped.lua`` holds the script's header (KEYS, ARGV, reply) and one ``--[[PART <name>]]``
marker per concern; :func:`assemble` puts ``lua/scoped/<name>.lua`` in each marker's place, in
order, and :func:`compile_scoped` then fills the policy markers.

The policy is compiled into the script. Fixed windows align to the time zone's offset from UTC
at the time of the call (a window spanning a daylight-saving change is off by that change on
Redis); calendar-month (``mo``) windows are computed here, in the time zone, and handed to the
script with each call (:func:`mailer.limits.windows.month_starts`; Lua has no calendar).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import timezone
from importlib import resources
from typing import Any

import redis

from mailer.clock import Clock, system_clock
from mailer.errors import CorruptState
from mailer.limits.checks import MAX_BOOKINGS
from mailer.limits.decision import Decision, new_decision
from mailer.limits.policy import Policy
from mailer.limits.scopes import Scope, build_scopes
from mailer.limits.windows import month_starts, offset_ms, zone

_LUA = resources.files("mailer.limits.stores").joinpath("lua")
_PART = re.compile(r"^--\[\[PART (\w+)\]\]$", re.MULTILINE)


def assemble(name: str = "scoped") -> str:
    """The text of ``lua/<name>.lua`` with each ``--[[PART <part>]]`` line replaced by the file
    ``lua/<name>/<part>.lua`` (package data); a missing part raises ``FileNotFoundError``."""
    folder = _LUA.joinpath(name)
    return _PART.sub(
        lambda found: folder.joinpath(f"{found[1]}.lua").read_text().rstrip("\n"),
        _LUA.joinpath(f"{name}.lua").read_text(),
    )


_TEMPLATE = assemble()
_KIND = {"sliding": 1, "fixed": 2, "gcra": 3}


def _suffix(kind: str, n: int) -> str:
    """The Lua of tier ``n``'s key suffixes: a gcra tier's string and hash, a fixed tier's
    count (before the window start), none for a sliding tier (compiled in: no formatting per
    call)."""
    if kind == "gcra":
        return f"':g{n}', ':G{n}'"
    if kind == "fixed":
        return f"':f{n}:'"
    return "''"


def compile_scoped(scopes: list[Scope], max_bookings: int = MAX_BOOKINGS) -> tuple[str, str]:
    """Return ``(source, sha1)`` of the script with these scopes' tiers and the bound on a
    shared scope's entries compiled in."""
    entries = []
    for scope in scopes:
        body = ", ".join(
            f"{{{_KIND[t.kind]}, {t.limit}, {t.window_ms}, "
            f"{-(-t.window_ms * 1000 // t.limit)}, {t.months}, {_suffix(t.kind, n)}}}"
            for n, t in enumerate(scope.tiers, start=1)
        )
        entries.append(
            f"{{{scope.keep_ms}, {int(scope.shared)}, {int(scope.has_log)}, {{{body}}}, "
            f"'{scope.name}'}}"
        )
    source = _TEMPLATE.replace("--[[SCOPES]]", ", ".join(entries))
    source = source.replace("--[[MAX]]", str(int(max_bookings)))
    return source, hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis's script name


@dataclass
class Planned:
    """One call: the present scopes' base keys, ``ARGV[1..7]``, the scopes themselves, the
    ``not_before`` (ms, 0: none) and the calendar-month window starts ("" without such tiers)."""

    keys: list[str]
    args: list[Any]
    present: list[Scope]
    not_before: int
    months: str

    def argv(self) -> list[Any]:
        """The whole ``ARGV`` of one script call over every present scope (one Redis)."""
        if self.months:
            return [*self.args, self.not_before, "", self.months]
        if self.not_before:
            return [*self.args, self.not_before]
        return self.args


class ScopedScript:
    """The script for ``policy``; ``clock`` (epoch seconds) is sent with each call when given
    (tests and simulations), else the script reads the server's ``TIME``."""

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
        self.scopes = build_scopes(policy, secret=secret, namespace=namespace)
        self.source, self.sha = compile_scoped(self.scopes, max_bookings)
        self._tz = zone(tz)
        self._clock = clock
        self._month_tiers = [t for s in self.scopes for t in s.tiers if t.months]

    def plan(
        self,
        mode: str,
        recipient: str,
        *,
        tenant: str | None = None,
        domain: str | None = None,
        tag: int = 0,
        max_wait_ms: int = 0,
        share: float = 1.0,
        not_before: int = 0,
        provider: str | None = None,
    ) -> Planned:
        """The call for ``mode`` (``a`` acquire, ``p`` peek, ``r`` release) of one mail;
        ``provider``: its provider's name (None: the domain, :meth:`Scope.subject`)."""
        keys: list[str] = []
        digits = ""
        present: list[Scope] = []
        for scope in self.scopes:
            subject = scope.subject(recipient, domain, tenant, provider)
            if subject is not None:
                keys.append(scope.storage_key(subject))
                digits += scope.digit
                present.append(scope)
        seconds = self._clock() if self._clock else None
        offset = 0
        if self._tz is not timezone.utc:
            offset = offset_ms(self._tz, seconds if seconds is not None else system_clock())
        given = "" if seconds is None else round(seconds * 1_000_000)
        shared = "1" if share == 1.0 else repr(share)
        args = [mode, given, tag, max_wait_ms, shared, offset, digits]
        months = ""
        if self._month_tiers:
            now_ms = round((seconds if seconds is not None else system_clock()) * 1000)
            months = month_starts(self._month_tiers, now_ms, self._tz)
        return Planned(keys, args, present, not_before, months)

    @staticmethod
    def decision(raw: list[Any], present: list[Scope]) -> Decision:
        """The decision an ``a`` or ``p`` reply ``{allowed, booked, at_ms, wait_ms, scope, tier,
        remaining...}`` says (scope and tier: 1-based, 0 for none; a scope without a tier: that
        shared scope's key is full, see ``MAX_BOOKINGS``)."""
        if raw[4]:
            scope = present[raw[4] - 1]
            tier = scope.tiers[raw[5] - 1] if raw[5] else None
            fields = (raw[0] == 1, raw[1] == 1, raw[2], raw[3], tier)
            return new_decision((*fields, tuple(raw[6:]), scope.name))
        return new_decision((raw[0] == 1, raw[1] == 1, raw[2], raw[3], None, tuple(raw[6:]), None))


def refused_data(exc: redis.exceptions.ResponseError) -> Exception:
    """What a script error means: :class:`~mailer.errors.CorruptState` when the script refused
    a key's data (its message names the scope and hashed key) or Redis found a key of another
    type, else the error itself (a bug, not bad data)."""
    text = str(exc)
    if "MAILGUARD_CORRUPT" in text:  # without Redis's " script: <sha>, on @user_script:N."
        said = text.split("MAILGUARD_CORRUPT", 1)[1].split(" script: ", 1)[0]
        return CorruptState("limiter: " + said.strip())
    if "WRONGTYPE" in text:
        return CorruptState(f"limiter: a scope's key holds another type of value: {text}")
    return exc
