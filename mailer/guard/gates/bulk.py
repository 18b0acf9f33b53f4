"""The bulk kinds' gates and their count of mails sent, wired in one place for the engine:
:class:`~mailer.guard.gates.unsubscribe.UnsubscribeGate` (with one-click unsubscribe on),
then :class:`~mailer.guard.gates.reputation.ReputationGate` (with the reputation on), and
:func:`sent_counter`, the reputation's count of each mail sent (one script call after the
ledger's record)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from mailer.errors import BackendUnavailable
from mailer.guard.data import GuardConfig, Prepared
from mailer.guard.gates import Gate
from mailer.guard.gates.reputation import ReputationGate
from mailer.guard.gates.unsubscribe import UnsubscribeGate
from mailer.metrics import Metrics
from mailer.outcomes import Outcome
from mailer.records.reputation import Reputation
from mailer.unsubscribe import Unsubscribe

log = logging.getLogger("mailguard")


def bulk_gates(
    unsubscribe: Unsubscribe | None,
    reputation: Reputation | None,
    config: GuardConfig,
    metrics: Metrics,
) -> list[Gate]:
    """The gates of the parts that are on, in their order (before holds: a hold books)."""
    gates: list[Gate] = []
    if unsubscribe is not None:
        gates.append(UnsubscribeGate(unsubscribe, config, metrics))
    if reputation is not None:
        gates.append(ReputationGate(reputation, config, metrics))
    return gates


def sent_counter(
    reputation: Reputation | None, metrics: Metrics
) -> Callable[[Prepared, Outcome], None] | None:
    """The count of one mail sent for its sender (marking its Message-ID for webhooks), or
    None with the reputation off. A ledger down here is logged and counted, never raised:
    the mail is sent."""
    if reputation is None:
        return None

    def count(mail: Prepared, outcome: Outcome) -> None:
        try:
            reputation.count_sent(mail.draft.sender, mail.kind.name, outcome.message_id)
        except BackendUnavailable:
            metrics.backend_down("ledger")
            log.warning("mail %s: not counted for its sender (ledger down)", mail.mail_id)

    return count
