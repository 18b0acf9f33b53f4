"""The bulk kinds' gates and their count of mails sent, wired in one place for the engine:
:class:`~mailer.guard.gates.unsubscribe.UnsubscribeGate` (with one-click unsubscribe on),
then :class:`~mailer.guard.gates.reputation.ReputationGate` (with the reputation on), then
:class:`~mailer.guard.gates.warmup.WarmupGate` (with warm-up plans), and
:func:`sent_recorder`, the ledger's record of each mail sent with the reputation's count riding
on its round trip."""

from __future__ import annotations

import logging
from collections.abc import Callable

from mailer.errors import BackendUnavailable
from mailer.guard.data import GuardConfig, Prepared
from mailer.guard.gates import Gate
from mailer.guard.gates.reputation import ReputationGate
from mailer.guard.gates.unsubscribe import UnsubscribeGate
from mailer.guard.gates.warmup import WarmupGate
from mailer.metrics import Metrics
from mailer.outcomes import Outcome
from mailer.records.ledger import Ledger, RedisLedger
from mailer.records.reputation import Reputation
from mailer.records.warmup import Warmup
from mailer.unsubscribe import Unsubscribe

log = logging.getLogger("mailguard")


def bulk_gates(
    unsubscribe: Unsubscribe | None,
    reputation: Reputation | None,
    config: GuardConfig,
    metrics: Metrics,
    warmup: Warmup | None = None,
) -> list[Gate]:
    """The gates of the parts that are on, in their order (before holds: a hold books); the
    warm-up gate last, so that a mail another gate stops is not counted in its plan."""
    gates: list[Gate] = []
    if unsubscribe is not None:
        gates.append(UnsubscribeGate(unsubscribe, config, metrics))
    if reputation is not None:
        gates.append(ReputationGate(reputation, config, metrics))
    if warmup is not None:
        gates.append(WarmupGate(warmup, config, metrics))
    return gates


def sent_recorder(
    ledger: Ledger, reputation: Reputation | None, metrics: Metrics
) -> Callable[[Prepared, Outcome], None] | None:
    """What records a mail sent (in place of the ledger's record) and counts it for its
    sender, marking its Message-ID (the provider's id, where a provider gave one) for webhooks;
    None with the reputation off.

    On one Redis the count rides on the record's round trip (one pipeline: the record's
    ``EVALSHA`` and the count's). Raises as the ledger's record does (the caller tries again);
    a count that fails is logged and counted, never raised: the mail is sent."""
    if reputation is None:
        return None

    def record(mail: Prepared, outcome: Outcome) -> None:
        sender, kind = mail.draft.sender, mail.kind.name
        # An ESP's webhooks name the mail by the id the ESP gave it (Anymail's event.message_id).
        marked = outcome.provider_message_id or outcome.message_id
        if isinstance(ledger, RedisLedger):
            first = ledger.record_command(outcome)
            rode = reputation.count_sent_after(first, sender, kind, marked)
            if rode is not None:
                if isinstance(rode[0], Exception):
                    raise rode[0]
                return
        ledger.record(outcome)
        try:
            reputation.count_sent(sender, kind, marked)
        except BackendUnavailable:
            metrics.backend_down("ledger")
            log.warning("mail %s: not counted for its sender (ledger down)", mail.mail_id)

    return record
