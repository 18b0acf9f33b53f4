"""Validation: a raw :class:`~mailer.guard.data.MailRequest` made into a
:class:`~mailer.guard.data.Prepared` mail, or ``dropped`` / ``invalid`` with the reason.

Normalises every address, renders the kind, checks the message. Building the message is most
of a run's own cost, so a mail that will wait (booked, held) is only checked
(:func:`mailer.mail.message.check_mail`) unless it must be built to be checked; it is built when
it is sent (:func:`message_of`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from email.message import EmailMessage

from mailer import outcomes as why
from mailer.clock import Clock
from mailer.errors import InvalidAddress, InvalidMessage
from mailer.guard.data import GuardConfig, MailRequest, Prepared, log_fields, mapping
from mailer.limits.checks import check_tenant
from mailer.mail.address import Recipient
from mailer.mail.envelope import (
    attachments,
    carried,
    charset,
    envelope_addresses,
    recipients,
    reply_to,
    sender_of_call,
)
from mailer.mail.kinds import Kind, Kinds, render
from mailer.mail.message import (
    Mail,
    build_message,
    check_mail,
    mail_message_id,
    needs_build_to_check,
)
from mailer.outcomes import Outcome
from mailer.steps import Finish, Progress

log = logging.getLogger("mailguard")


class Validator:
    """Turns requests into prepared mails. ``recipient_key`` hashes a limit key for outcomes."""

    def __init__(
        self,
        kinds: Kinds,
        config: GuardConfig,
        clock: Clock,
        recipient_key: Callable[[str], str],
    ) -> None:
        self.kinds = kinds
        self.config = config
        self._clock = clock
        self._recipient_key = recipient_key

    def validate(self, request: MailRequest, progress: Progress) -> Prepared | Finish:
        """The mail ready to send, or ``dropped`` / ``invalid`` with the reason."""
        now = self._clock()
        base = Outcome(
            status="dropped",
            mail_id=request.mail_id,
            kind=request.kind if isinstance(request.kind, str) else "?",
            attempts=progress.attempts,
            deferrals=progress.deferrals,
            decided_at=now,
        )
        try:
            recipient, more, kind, draft, message = self._build(request, now)
            hashed = self._recipient_key(recipient.limit_key)
            tenant = None if request.tenant is None else check_tenant(request.tenant)
        except (InvalidAddress, InvalidMessage, ValueError) as exc:
            dropped = base.but(reason=why.INVALID, detail=str(exc))
            log.info(
                "mail %s dropped: invalid input: %s",
                request.mail_id,
                exc,
                extra=log_fields(dropped),
            )
            return Finish(dropped)
        return Prepared(
            mail_id=request.mail_id,
            kind=kind,
            limit_key=recipient.limit_key,
            draft=draft,
            message=message,
            built_at=now,
            tenant=tenant,
            more_keys=more,
            base=base.but(recipient=hashed, message_id=mail_message_id(draft)),
        )

    def _build(
        self, request: MailRequest, now: float
    ) -> tuple[Recipient, tuple[str, ...], Kind, Mail, EmailMessage | None]:
        """Normalise, render and check; raises ``InvalidAddress`` / ``InvalidMessage``.

        Returns the first recipient (its key is the mail's), the limit keys of the other
        envelope recipients (deduplicated), the kind, the mail and its message if it had to be
        built to be checked.
        """
        rules = self.config.rules
        to = recipients(request.to, "to", rules)
        cc = recipients(request.cc, "cc", rules)
        bcc = recipients(request.bcc, "bcc", rules)
        everyone = [recipient for _, recipient in (*to, *cc, *bcc)]
        if not everyone:
            raise InvalidAddress("to: no address")
        keys = list(dict.fromkeys(r.limit_key for r in everyone))
        kind = self.kinds[request.kind if isinstance(request.kind, str) else "?"]
        context = mapping(request.context, "context")
        headers = mapping(request.headers, "headers")
        shown_from, from_address = sender_of_call(request.from_email, self.config.sender, rules)
        whole = carried(request.mime)
        if whole is None:
            subject, body, html = render(kind, request.subject, request.body, request.html, context)
        else:  # a carried message is sent as it is; anything beside it is refused
            subject, body, html = request.subject or "", request.body or "", request.html
        mail = Mail(
            to=(),
            subject=subject,
            body=body,
            html=html,
            mail_id=request.mail_id,
            sender=shown_from,
            headers=headers,
            reply_to=tuple(reply_to(request.reply_to, rules)),
            attachments=attachments(request.attachments),
            charset=charset(request.charset),
            carried=whole,
            # to, cc and bcc: the checked addresses' shown forms
            addresses=envelope_addresses(tuple(to), tuple(cc), tuple(bcc), from_address, headers),
        )
        if needs_build_to_check(mail):
            return everyone[0], tuple(keys[1:]), kind, mail, build_message(mail, now=now)
        check_mail(mail)
        return everyone[0], tuple(keys[1:]), kind, mail, None


def message_of(mail: Prepared) -> EmailMessage:
    """The mail's message, built now unless it was built to be checked."""
    if mail.message is not None:
        return mail.message
    return build_message(mail.draft, now=mail.built_at)
