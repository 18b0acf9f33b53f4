"""Recipients a relay refused at ``RCPT`` while it took the mail for the others.

:func:`refusals` makes each refused recipient's entry in the ``sent`` outcome (its keyed hash,
the code, the masked reply): a permanent refusal whose reply says the mailbox is gone
suppresses the address (as a hard bounce of a mail to it alone does); a temporary one is given
a mail id of its own, ``<mail id>/<n>`` (``n``: the address's place among the envelope's
recipients, from 1), for a copy of the mail to that recipient alone. :func:`copies` gives the
requests of those copies, from the mail's request and its outcome, so a run that finds the
outcome recorded (a repeat after a crash) gives the same copies again: each copy's own ledger
claim sends it once, however often it is asked for. The copy is a mail of its own: judged by
the limiter again, retried with its own backoff, until its kind's lifetime counted from its
first run. Not for a mail refused for every recipient: that is a refusal of the whole mail
(:class:`~mailer.guard.data.Refused`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from mailer.errors import PermanentSendError
from mailer.guard.data import MailRequest, Prepared
from mailer.mail.address import AddressRules
from mailer.mail.envelope import Envelope, recipients
from mailer.mail.replies import temporary
from mailer.mail.transports.base import SendReceipt, mask_addresses
from mailer.outcomes import Outcome

#: Suppresses a refused co-recipient (the mail, its limit key, its keyed hash, the refusal):
#: True when it did.
Suppress = Callable[[Prepared, str, str, PermanentSendError], bool]


def refusals(
    receipt: SendReceipt,
    envelope: Envelope,
    mail: Prepared,
    recipient_key: Callable[[str], str],
    suppress: Suppress,
) -> tuple[dict[str, Any], ...]:
    """The outcome's ``refused`` entries for ``receipt.refused``; suppresses the addresses
    refused for good whose reply says the mailbox is gone (``suppress``)."""
    boxes = (*envelope.to, *envelope.cc, *envelope.bcc)
    keys = {box.address: box.recipient.limit_key for box in boxes}
    places = {box.address: n for n, box in enumerate(boxes, start=1)}
    entries: list[dict[str, Any]] = []
    addresses = list(envelope.recipients)
    for refused in receipt.refused:
        key = keys.get(refused.address, refused.address.lower())  # hashed: never in clear
        hashed = recipient_key(key)
        entry: dict[str, Any] = {
            "recipient": hashed,
            "code": refused.code,
            "reply": mask_addresses(refused.reply, addresses),  # a transport's own may not
            "suppressed": False,
            "retry": None,
        }
        if temporary(refused.code):
            place = places.get(refused.address, len(boxes) + len(entries) + 1)
            entry["retry"] = f"{mail.mail_id}/{place}"
        else:
            error = PermanentSendError(
                "the server refused the recipient", code=refused.code, reply=entry["reply"]
            )
            entry["suppressed"] = suppress(mail, key, hashed, error)
        entries.append(entry)
    return tuple(entries)


def copies(
    request: MailRequest,
    outcome: Outcome,
    rules: AddressRules,
    recipient_key: Callable[[str], str],
) -> list[MailRequest]:
    """The requests of the copies that retry the recipients ``outcome`` names as temporarily
    refused: ``request`` to that recipient alone, in the field (to, cc, bcc) it had, under its
    ``retry`` mail id. Empty when there is none (the usual case: nothing is parsed)."""
    wanted = {e["retry"]: e["recipient"] for e in outcome.refused if e.get("retry")}
    if not wanted:
        return []
    by_key = {
        recipient_key(box.recipient.limit_key): (field, box.shown)
        for field in ("to", "cc", "bcc")
        for box in recipients(getattr(request, field), field, rules)
    }
    made = []
    for retry, key in wanted.items():
        if key in by_key:
            field, shown = by_key[key]
            fields: dict[str, Any] = {"to": [], "cc": None, "bcc": None, field: shown}
            made.append(replace(request, mail_id=retry, **fields))
    return made
