"""The scopes of a policy as the limiter keeps them: their tiers, key hashers and subjects.

A mail has a subject in each scope: its recipient (the normalised address), the recipient's
domain, the one :data:`SENDER_KEY`, its tenant when it names one, and its provider (the
recipient domain's mailbox provider, :mod:`mailer.providers`) in the one provider scope that
applies to it: ``provider google`` for a Google mail when the policy names Google (its subject
``google``), else ``provider`` (the provider's name: each provider its own count). A mail's
provider scopes but that one have no subject for it, so it skips them as a mail without a
tenant skips ``tenant``: one scope per named provider keeps the decision, the stores and the
Redis script generic (a scope is a list of tiers over subjects), at the cost of one entry per
named provider in the compiled script. A policy whose only tiers
are the recipient's sliding tiers is :func:`single_key`: one key per mail, which the stores
decide on a faster path (the sliding-log script, or a dict of logs in memory).
"""

from __future__ import annotations

from mailer.limits.keys import KeyHasher, check_key
from mailer.limits.policy import PROVIDER, Policy, Tier, is_provider_scope

#: The scopes a kind's share applies to (the recipient's own budget is not shared), and every
#: provider scope (:data:`~mailer.limits.policy.PROVIDER`, ``provider NAME``).
SHARED_SCOPES = ("domain", "sender", "tenant")
#: The sender scope's one subject: every worker and host shares it.
SENDER_KEY = "sender"
#: The recipient :meth:`mailer.Limiter.room` asks about a shared scope with: one no mail goes
#: to (``.invalid`` is reserved, RFC 2606), so its own scopes are empty.
STATUS_RECIPIENT = "room@mailguard.invalid"
#: How many storage keys of shared subjects a scope memoises.
_MEMO_KEYS = 4096


def single_key(policy: Policy) -> bool:
    """Whether ``policy`` has recipient sliding tiers only: one key (one log) per mail."""
    return not policy.scoped and all(t.kind == "sliding" for t in policy.tiers)


def scope_tiers(policy: Policy) -> list[tuple[str, tuple[Tier, ...]]]:
    """The scopes a limiter keeps for ``policy``, in decision order: the recipient always (its
    log keeps every mail's tag and slot, tiers or not), then each other scope with tiers."""
    return [("recipient", policy.tiers), *policy.scopes]


class Scope:
    """One scope of a policy: its tiers, key hasher and the numbers the decision needs."""

    __slots__ = ("digit", "hasher", "keep_ms", "keys", "name", "named", "only", "shared", "tiers")

    def __init__(self, name: str, tiers: tuple[Tier, ...], hasher: KeyHasher) -> None:
        self.name = name
        self.tiers = tiers
        self.hasher = hasher
        self.shared = name in SHARED_SCOPES or is_provider_scope(name)
        # The provider scope's: the providers named on their own, whose mails it skips.
        self.named: frozenset[str] = frozenset()
        # A named provider's scope: that provider's name ("" for every other scope).
        self.only = name[len(PROVIDER) + 1 :] if name.startswith(PROVIDER + " ") else ""
        # How long an entry matters: the longest window (a recipient log without tiers of its
        # own keeps tags as long as any scope's window, for idempotency and release).
        self.keep_ms = max((t.window_ms for t in tiers), default=0)
        # Its 1-based index among the policy's scopes as one character for the Redis script's
        # ARGV[7], chr(48 + index): "1".."9", then ":", ";"... for a policy naming providers.
        self.digit = ""
        # Storage keys of shared subjects (the sender, a few tenants and domains), memoised.
        self.keys: dict[str, str] = {}

    @property
    def has_log(self) -> bool:
        """Whether it keeps a log: the recipient's always (tags), others for sliding tiers."""
        return self.name == "recipient" or any(t.kind == "sliding" for t in self.tiers)

    def subject(
        self,
        recipient: str,
        domain: str | None,
        tenant: str | None,
        provider: str | None = None,
    ) -> str | None:
        """This scope's subject for a mail to ``recipient`` (None: the mail has none here).

        ``domain`` defaults to the part of ``recipient`` after its last ``@``. ``provider``
        (the mail's provider's name; None: the domain, as :class:`~mailer.providers.
        ProviderFinder` names a domain whose MX is not known yet) is the subject of
        ``provider NAME`` when it is NAME, and of ``provider`` when the policy does not name it.
        """
        name = self.name
        if name == "recipient":
            return recipient
        if name == "sender":
            return SENDER_KEY
        if name == "tenant":
            return tenant or None
        if name == "domain" or not provider:  # no provider given: the domain is its own
            found = (domain if domain is not None else recipient.rpartition("@")[2]) or None
            if name == "domain" or found is None:
                return found
            provider = found
        if name == PROVIDER:
            return None if provider in self.named else provider
        return provider if provider == self.only else None

    def storage_key(self, subject: str) -> str:
        """``subject``'s storage key in this scope, memoised for shared subjects."""
        if self.name == "recipient":
            return self.hasher.storage_key(subject)
        found = self.keys.get(subject)
        if found is None:
            found = self.hasher.storage_key(check_key(subject))
            if len(self.keys) < _MEMO_KEYS:
                self.keys[subject] = found
        return found


def build_scopes(policy: Policy, *, secret: str | bytes | None, namespace: str) -> list[Scope]:
    """The scopes of ``policy`` with their hashers (``<policy name>.<scope>``), recipient first.

    The recipient's log keeps entries as long as the longest window of any scope.
    """
    scopes = [
        Scope(name, tiers, KeyHasher(secret, namespace, f"{policy.name}.{name}"))
        for name, tiers in scope_tiers(policy)
    ]
    longest = max(t.window_ms for _, tiers in policy.scope_tiers() for t in tiers)
    scopes[0].keep_ms = max(scopes[0].keep_ms, longest)
    named = frozenset(scope.only for scope in scopes if scope.only)
    for index, scope in enumerate(scopes, start=1):
        scope.digit = chr(48 + index)
        if scope.name == PROVIDER:
            scope.named = named
    return scopes


def find_scope(scopes: list[Scope], name: str, policy: Policy) -> Scope:
    """The scope called ``name``; ``ValueError`` naming the policy when it has none."""
    for scope in scopes:
        if scope.name == name:
            return scope
    raise ValueError(f"policy {policy} has no scope {name!r}")
