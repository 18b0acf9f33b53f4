"""The live policy's plain data and store protocol (:mod:`mailer.records.policy`: the story)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from mailer.limits.policy import Policy
from mailer.mail.kinds import ENV_PREFIX, Kinds
from mailer.settings import Settings

#: What a live policy may change per kind: its tolerance and its share (not its priority, which
#: is decided when a mail is enqueued, nor its templates).
KIND_FIELDS = ("max_wait", "share")


@dataclass(frozen=True)
class LivePolicy:
    """One stored version: the policy's text (``MAILGUARD_POLICY``'s form), kinds' changes
    (``{"code": {"max_wait": "2m", "share": "0.5"}}``, as text), when it was set (epoch
    seconds) and its version (1, 2, ... ; 0 for one not stored yet)."""

    policy: str
    kinds: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    set_at: float = 0.0
    version: int = 0

    def to_json(self) -> str:
        """The stored value (the version is where it is stored, not in it)."""
        kinds = {k: dict(v) for k, v in self.kinds.items()}
        return json.dumps({"policy": self.policy, "kinds": kinds, "set_at": self.set_at})

    @classmethod
    def from_json(cls, raw: bytes | str, version: int) -> LivePolicy:
        """A stored version; ``ValueError`` for a value that is not one (one line)."""
        try:
            data = json.loads(raw)
            policy, kinds, set_at = data["policy"], data.get("kinds", {}), data.get("set_at", 0)
            if not isinstance(policy, str) or not isinstance(kinds, dict):
                raise TypeError("policy must be text and kinds an object")
            shown = {str(k): {str(f): str(v) for f, v in dict(c).items()} for k, c in kinds.items()}
            return cls(policy, shown, float(set_at), version)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(
                f"stored value is not a policy ({type(exc).__name__}: {exc})"
            ) from None

    def describe(self) -> str:
        """The policy and its kinds' changes on one line: ``1/1m, 5/1h; code max_wait=2m``."""
        changes = [
            f"{kind} {name}={value}"
            for kind, fields in sorted(self.kinds.items())
            for name, value in sorted(fields.items())
        ]
        return "; ".join([self.policy, *changes])

    def apply(self, settings: Settings) -> Settings:
        """``settings`` with this policy and these kinds' changes; ``ValueError`` (one line) for
        a policy that does not parse, an unknown kind or field, a bad duration or share."""
        try:
            policy = Policy.parse(self.policy, name="recipient")
        except ValueError as exc:
            raise ValueError(f"policy {self.policy[:80]!r}: {exc}") from None
        return replace(settings, policy=policy, kinds=self._kinds(settings.kinds))

    def _kinds(self, base: Kinds) -> Kinds:
        env: dict[str, str] = {}
        for kind, fields in self.kinds.items():
            if kind not in base:
                raise ValueError(f"unknown kind {kind!r}; known: {', '.join(sorted(base))}")
            for name, value in fields.items():
                if name not in KIND_FIELDS:
                    raise ValueError(f"kind {kind!r}: {name!r} is not one of {KIND_FIELDS}")
                env[f"{ENV_PREFIX}{kind.upper()}_{name.upper()}"] = value
        return Kinds.from_env(env, base=base)


class PolicyStore(Protocol):
    """Where versions live. Every method is one atomic step."""

    def version(self) -> int:
        """The version in force (the latest stored), 0 when none is."""
        ...

    def get(self, version: int) -> str | bytes | None:
        """The stored value of ``version``, or None."""
        ...

    def put(self, value: str) -> int:
        """Store ``value`` as the next version and make it the one in force; its number."""
        ...

    def history(self) -> list[tuple[int, str | bytes]]:
        """Every stored version and its value, oldest first."""
        ...
