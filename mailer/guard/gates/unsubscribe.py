"""The unsubscribe gate: bulk kinds honour and offer one-click unsubscribe
(:mod:`mailer.unsubscribe`).

Before admission, a mail of a bulk kind to a recipient who unsubscribed from its sender's bulk
kinds is ``dropped`` / ``unsubscribed`` (a message to several recipients goes without the
unsubscribed ones, dropped when every one is); any other mail of a bulk kind goes on carrying the
``List-Unsubscribe`` and ``List-Unsubscribe-Post`` headers (added here, to the mail the guard
sends, so the message builder needs no hook). Mails of other kinds pass untouched. The entry
is read with the suppression list (one ``MGET``); a list that cannot be read defers the mail as
``ledger_unavailable``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from mailer import outcomes as why
from mailer.errors import BackendUnavailable
from mailer.guard.data import Admitted, GuardConfig, Prepared, Refused, log_fields
from mailer.guard.gates import Reads
from mailer.guard.outage import backend_down
from mailer.mail.envelope import without_recipients
from mailer.metrics import Metrics
from mailer.steps import Finish, Progress, Step
from mailer.unsubscribe import Unsubscribe

log = logging.getLogger("mailguard")


class UnsubscribeGate:
    """Drops bulk mails to unsubscribed recipients; stamps the others' unsubscribe headers."""

    def __init__(self, unsubscribe: Unsubscribe, config: GuardConfig, metrics: Metrics) -> None:
        self.unsubscribe = unsubscribe
        self.suppressions = unsubscribe.suppressions
        self.config = config
        self.metrics = metrics

    def reads(self, mail: Prepared) -> Reads | None:
        if mail.more_keys:
            return None
        if not mail.kind.unsubscribe:  # nothing to read, but the others read together
            client = self.suppressions.plain_read(mail.limit_key)
            return None if client is None else (client[0], [])
        read = self.suppressions.unsubscribed_read(mail.limit_key, mail.draft.sender)
        return None if read is None else (read[0], [read[1]])

    def before_admit(
        self, mail: Prepared, progress: Progress, raws: list[Any] | None
    ) -> Prepared | Admitted | Step:
        if not mail.kind.unsubscribe:
            return mail
        sender = mail.draft.sender
        keys = [mail.limit_key, *mail.more_keys]
        try:
            if raws is not None:
                found = {mail.limit_key: self.suppressions.from_raw(raws[0])}
            else:
                found = {k: self.suppressions.unsubscribed(k, sender) for k in keys}
        except BackendUnavailable as exc:
            self.metrics.backend_down("ledger")
            return backend_down(self.config, mail.base, progress, exc, why.LEDGER_UNAVAILABLE)
        gone = {k: entry for k, entry in found.items() if entry is not None}
        kept = [k for k in keys if k not in gone]
        if not kept:
            dropped = mail.base.but(reason=why.UNSUBSCRIBED, detail=gone[mail.limit_key].cause)
            log.info(
                "mail %s dropped: recipient unsubscribed from the sender's bulk kinds",
                mail.mail_id,
                extra=log_fields(dropped),
            )
            return Finish(dropped)
        if gone:  # several recipients: the others still get it
            draft = without_recipients(mail.draft, set(gone), self.config.rules)
            more = tuple(kept[1:])
            mail = replace(mail, limit_key=kept[0], more_keys=more, draft=draft, message=None)
        return with_headers(mail, self.unsubscribe.headers(mail.limit_key, sender, mail.kind.name))

    def on_send_error(self, mail: Prepared, refused: Refused) -> Admitted | Step | None:
        return None


def with_headers(mail: Prepared, headers: dict[str, str]) -> Prepared:
    """``mail`` carrying ``headers`` (replacing any of the same names), in its draft and in its
    message when that was built already."""
    names = {name.lower() for name in headers}
    kept = {k: v for k, v in mail.draft.headers.items() if k.lower() not in names}
    draft = replace(mail.draft, headers={**kept, **headers})
    if mail.message is not None:
        for name, value in headers.items():
            del mail.message[name]
            mail.message[name] = value
    return replace(mail, draft=draft)
