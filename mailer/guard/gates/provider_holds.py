"""The provider side of the holds gate: a provider's rate reply holds that sender at that
provider only (:class:`~mailer.records.holds.Holds`, provider holds).

Which provider a refusal belongs to is decided by two witnesses that must agree: the reply
names its provider (a rule of :data:`~mailer.mail.replies.PROVIDER_RULES`: Gmail's ``4.7.28``,
Yahoo's ``[TSS04]``, Microsoft's ``RP-00x``...) and the mail's recipient is at that provider by
its MX (:class:`~mailer.providers.ProviderFinder`, the finder the provider scopes use). A rate
reply that names no provider is the relay's own (Postfix's anvil, SES, a smarthost's quota), and
one that names a provider the recipient is not at came through that provider as a relay (a
Workspace SMTP relay refusing mail to Outlook): both hold the sender, as without provider holds.

The finder is asked only on such a refusal, and before admission only while some provider's
hold or pace is stored: a deployment with no provider hold in force asks no DNS for it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mailer.guard.data import Prepared
from mailer.mail.replies import Reaction
from mailer.records.holds import Hold, Holds
from mailer.records.holds.keyed import Read
from mailer.records.holds.pace import Pace

#: The scope words of a provider's hold and of its pace (``provider google``).
PROVIDER = "provider"


@dataclass(frozen=True)
class Met:
    """What a mail meets at its provider ``name``: the hold in force (None: none; read as
    stated, the provider's own rule, so a mail whose deadline comes first is dropped, not sent
    into it), and the pace stored after one (None: none)."""

    name: str
    hold: Hold | None
    pace: Pace | None
    #: the ``since`` of the hold and of the pace as stored (0.0: none), for the doubling rule
    seen_hold: float
    seen_pace: float

    @property
    def scope(self) -> str:
        return f"{PROVIDER} {self.name}"


def provider_of(holds: Holds, mail: Prepared) -> str | None:
    """The provider of ``mail``'s (first) recipient by MX, from the holds' finder; None with
    provider holds off or a recipient without a domain the finder takes. Never raises (the
    finder bounds DNS and answers the domain itself on a failure)."""
    finder = holds.providers
    domain = mail.limit_key.rpartition("@")[2]
    if finder is None or not domain:
        return None
    try:
        return str(finder.provider_of(domain).name)
    except ValueError:  # not a domain the finder takes: no provider of ours
        return None


def met(holds: Holds, mail: Prepared, read: Read, now: float) -> Met | None:
    """What ``mail`` meets at its provider, when a ruled provider's hold or pace is stored and
    the mail's recipient is at it; else None (no finder call when nothing is stored)."""
    if not read.providers:
        return None
    name = provider_of(holds, mail)
    if name is None or name not in read.providers:
        return None
    hold, pace = read.providers[name]
    in_force = replace(hold, stated=True) if hold is not None and hold.until > now else None
    return Met(
        name,
        in_force,
        pace,
        seen_hold=0.0 if hold is None else hold.since,
        seen_pace=0.0 if pace is None else pace.since,
    )


def held_by(holds: Holds, mail: Prepared, reaction: Reaction) -> str | None:
    """The provider whose hold a refusal of ``mail`` starts: its rule's provider when the mail's
    recipient is at it (by MX); None (the sender is held) otherwise."""
    rule = reaction.rule
    if rule is None or holds.providers is None:
        return None
    return rule.provider if provider_of(holds, mail) == rule.provider else None


def provider_seconds(reaction: Reaction, configured: float) -> tuple[float, bool]:
    """How long a provider's hold lasts at least, in seconds, and whether that is the reply's
    own stated delay: the delay the reply states when it is longer than the rule's, else the
    rule's (``configured`` when the rule names none). A rule's length is not stated: an echo
    of the same throttling (a send admitted before the hold) does not lengthen the hold."""
    assert reaction.rule is not None
    least = reaction.rule.hold or configured
    if reaction.hold is not None and reaction.hold >= least:
        return reaction.hold, True
    return least, False
