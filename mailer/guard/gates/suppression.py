"""The suppression gate: addresses whose mailbox is gone are not contacted.

Before admission, a mail to a suppressed address is ``dropped`` / ``suppressed``; a message to
several recipients goes without the suppressed ones (their addresses taken out of To, Cc and
Bcc), and is dropped when every one is. On a send error, a hard bounce (the reply says the
mailbox is gone) suppresses the recipient for ``suppress_for`` seconds. The list lives where the
ledger does: a list that cannot be read defers the mail as ``ledger_unavailable``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from mailer import outcomes as why
from mailer.durations import human
from mailer.errors import BackendUnavailable, PermanentSendError
from mailer.guard.data import Admitted, GuardConfig, Prepared, Refused, iso, log_fields
from mailer.guard.gates import Reads
from mailer.guard.outage import backend_down
from mailer.mail.envelope import without_recipients
from mailer.mail.replies import Action, reaction_of
from mailer.metrics import Metrics
from mailer.records.suppression import Suppression, Suppressions
from mailer.steps import Finish, Progress, Step

log = logging.getLogger("mailguard")


class SuppressionGate:
    """Drops mails to suppressed addresses; suppresses an address after a hard bounce."""

    def __init__(self, suppressions: Suppressions, config: GuardConfig, metrics: Metrics) -> None:
        self.suppressions = suppressions
        self.config = config
        self.metrics = metrics

    def reads(self, mail: Prepared) -> Reads | None:
        if mail.more_keys:
            return None
        read = self.suppressions.plain_read(mail.limit_key)
        return None if read is None else (read[0], [read[1]])

    def before_admit(
        self, mail: Prepared, progress: Progress, raws: list[Any] | None
    ) -> Prepared | Admitted | Step:
        """``mail`` to go on, without its suppressed recipients; ``dropped`` / ``suppressed``
        when none is left; ``deferred`` / ``ledger_unavailable`` when the list is down."""
        keys = [mail.limit_key, *mail.more_keys]
        try:
            if raws is not None:
                found = {mail.limit_key: self.suppressions.from_raw(raws[0])}
            else:
                found = {k: self.suppressions.suppressed_key(k) for k in keys}
        except BackendUnavailable as exc:
            self.metrics.backend_down("ledger")
            return backend_down(self.config, mail.base, progress, exc, why.LEDGER_UNAVAILABLE)
        gone = {k: entry for k, entry in found.items() if entry is not None}
        if not gone:
            return mail
        kept = [k for k in keys if k not in gone]
        if not kept:
            return _dropped(mail, gone[mail.limit_key])
        draft = without_recipients(mail.draft, set(gone), self.config.rules)
        log.info(
            "mail %s: %d suppressed recipients left out of %d",
            mail.mail_id,
            len(gone),
            len(keys),
            extra=log_fields(mail.base),
        )
        more = tuple(kept[1:])
        return replace(mail, limit_key=kept[0], more_keys=more, draft=draft, message=None)

    def on_send_error(self, mail: Prepared, refused: Refused) -> Admitted | Step | None:
        """A hard bounce suppresses the recipient; the mail's answer is left to the rest."""
        exc = refused.error
        if not isinstance(exc, PermanentSendError):
            return None
        if reaction_of(exc).action is not Action.SUPPRESS:
            return None
        self._suppress(mail, mail.limit_key, mail.base.recipient, exc)
        return None

    def suppress_refused(
        self, mail: Prepared, key: str, hashed: str, exc: PermanentSendError
    ) -> bool:
        """A co-recipient (limit key ``key``, ``hashed`` its keyed hash) refused for good at
        ``RCPT`` while the mail went to the others: suppressed as a hard bounce of its own
        would be, when the reply says the mailbox is gone. True when it was suppressed."""
        if reaction_of(exc).action is not Action.SUPPRESS:
            return False
        return self._suppress(mail, key, hashed, exc)

    def _suppress(
        self, mail: Prepared, key: str, hashed: str | None, exc: PermanentSendError
    ) -> bool:
        cause = f"{exc.code or ''} {exc.reply}".strip()
        try:
            self.suppressions.suppress(key, seconds=self.config.suppress_for, cause=cause)
        except BackendUnavailable:
            self.metrics.backend_down("ledger")
            log.warning(
                "mail %s: could not suppress its recipient (ledger unavailable)", mail.mail_id
            )
            return False
        log.warning(
            "mail %s: recipient %s suppressed for %s after a hard bounce",
            mail.mail_id,
            hashed,
            human(self.config.suppress_for),
            extra={"mail_id": mail.mail_id, "recipient": hashed},
        )
        return True


def _dropped(mail: Prepared, entry: Suppression) -> Finish:
    """``dropped`` / ``suppressed``, with the reply that suppressed the (first) address."""
    dropped = mail.base.but(
        reason=why.SUPPRESSED,
        smtp_reply=entry.cause,
        detail=f"suppressed until {iso(entry.until)}",
    )
    log.info("mail %s dropped: recipient suppressed", mail.mail_id, extra=log_fields(dropped))
    return Finish(dropped)
