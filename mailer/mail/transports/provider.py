"""What an email provider's API answer asks for: SES error codes, Anymail's errors, anything else.

An API transport (:mod:`~mailer.mail.transports.ses`,
:mod:`~mailer.mail.transports.django_backend`, :mod:`~mailer.mail.transports.anymail`; Anymail's
errors are read in :mod:`~mailer.mail.transports.anymail_errors`) turns its provider's error
into a :class:`~mailer.errors.SendError` that states its reaction
(:class:`~mailer.mail.replies.Reaction`), so the guard answers it as it answers an SMTP reply:

========================================================  ========================================
provider answer                                           reaction
========================================================  ========================================
SES ``TooManyRequestsException``, ``Throttling``,         hold the sender (``HOLD_SENDER``, the
``LimitExceededException``, "Maximum sending rate         configured hold length)
exceeded"
SES ``AccountSendingPausedException``,                    hold the sender for
``SendingPausedException``, ``AccountSuspendedException`` ``MAILGUARD_THROTTLE_HOLD_MAX``, logged
                                                          as an error
SES ``MessageRejected``, ``MailFromDomainNotVerified``,   fail this mail (``FAIL``)
``BadRequestException``, ``NotFoundException``
Anymail ``AnymailRecipientsRefused``                      fail and suppress the recipient
an HTTP 429, or a 4xx that says rate limit / throttling   hold the sender
HTTP 401 / 403, SES's credential errors                   hold the transport (our credentials
(``InvalidClientTokenId``, ``SignatureDoesNotMatch``...)  are refused: every mail would be)
another HTTP 4xx (an invalid request)                     fail this mail
a network error, an HTTP 408 or 5xx                       retry (``RETRY``)
anything else                                             retry until the kind's lifetime,
                                                          then ``dropped`` / ``expired`` with
                                                          the provider's message
========================================================  ========================================

The provider's message is kept as the error's ``reply`` (recipient addresses masked); ``code``
stays None: there is no SMTP reply. Pure, no I/O.
"""

from __future__ import annotations

import logging

from mailer.errors import PermanentSendError, SendError, TransientSendError
from mailer.mail.replies import Action, Reaction, rate_worded
from mailer.mail.transports.base import mask_addresses

log = logging.getLogger("mailguard")

#: SES error codes that say we send too fast (or over the daily quota): hold the sender.
SES_THROTTLING = frozenset(
    {"TooManyRequestsException", "Throttling", "ThrottlingException", "LimitExceededException"}
)
#: SES error codes that say the account may not send at all for now: a long sender hold.
SES_PAUSED = frozenset(
    {"AccountSendingPausedException", "SendingPausedException", "AccountSuspendedException"}
)
#: SES error codes that refuse our credentials (every mail alike): hold the transport.
SES_CREDENTIALS = frozenset(
    {
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "IncompleteSignature",
        "ExpiredToken",
        "ExpiredTokenException",
        "AccessDenied",
        "AccessDeniedException",
    }
)
#: SES error codes that refuse this mail for good.
SES_REJECTED = frozenset(
    {
        "MessageRejected",
        "MailFromDomainNotVerified",
        "MailFromDomainNotVerifiedException",
        "BadRequestException",
        "NotFoundException",
    }
)
_RATE_TEXT = "maximum sending rate exceeded"


def ses_error(
    code: str, message: str, *, status: int | None, recipients: list[str], paused_hold: float
) -> SendError:
    """The ``SendError`` for an SES API error ``code`` (``Error.Code``) with its ``message``
    and HTTP ``status``; ``paused_hold`` is the sender hold in seconds for a paused account."""
    reply = mask_addresses(f"SES {code}: {message}".strip(), recipients)
    if code in SES_THROTTLING or _RATE_TEXT in message.lower() or status == 429:
        return throttled(reply)
    if code in SES_PAUSED:
        log.error(
            "SES refuses every mail: the account's sending is paused or suspended (%s); every "
            "worker holds its mail for %.0f s; see the SES console",
            reply,
            paused_hold,
        )
        return TransientSendError(
            "the provider paused sending",
            reply=reply,
            reaction=Reaction(Action.HOLD_SENDER, hold=paused_hold),
        )
    if code in SES_CREDENTIALS or status in (401, 403):
        return credentials_refused(reply)
    if code in SES_REJECTED:
        return rejected(reply)
    if status is not None and status >= 500:
        return network(reply)
    return unknown(reply)


def http_error(status: int | None, reply: str) -> SendError:
    """An HTTP API's error by its status and its answer ``reply``: 429, or a 4xx whose answer
    says rate limit or throttling, holds the sender; 401 / 403 (refused credentials) hold the
    transport; no answer (None), 408 or a 5xx retries; any other 4xx (an invalid request)
    fails this mail; anything else is unknown (bounded retries)."""
    if status == 429 or (status is not None and 400 <= status < 500 and rate_worded(reply)):
        return throttled(reply)
    if status in (401, 403):
        return credentials_refused(reply)
    if status is None or status == 408 or status >= 500:
        return network(reply)
    if 400 <= status < 500:
        return rejected(reply)
    return unknown(reply)


def throttled(reply: str) -> TransientSendError:
    """The provider says we send too fast: hold the sender (the configured length)."""
    return TransientSendError(
        "the provider throttles us", reply=reply, reaction=Reaction(Action.HOLD_SENDER)
    )


def credentials_refused(reply: str) -> PermanentSendError:
    """The provider refuses our credentials: hold the transport (every mail would be refused
    alike; :mod:`mailer.records.holds.transport`), fail nothing."""
    return PermanentSendError(
        "the provider refused our credentials",
        reply=reply,
        reaction=Reaction(Action.HOLD_TRANSPORT),
    )


def rejected(reply: str) -> PermanentSendError:
    """The provider refused this mail for good: fail it, suppress nobody."""
    return PermanentSendError(
        "the provider refused the mail", reply=reply, reaction=Reaction(Action.FAIL)
    )


def refused_recipients(reply: str) -> PermanentSendError:
    """The provider refused (or had suppressed) every recipient: fail and suppress."""
    return PermanentSendError(
        "the provider refused the recipients", reply=reply, reaction=Reaction(Action.SUPPRESS)
    )


def network(reply: str) -> TransientSendError:
    """The provider could not be reached, or failed on its side: retry as for SMTP."""
    return TransientSendError(
        "the provider could not be reached", reply=reply, reaction=Reaction(Action.RETRY)
    )


def unknown(reply: str) -> TransientSendError:
    """An answer the mapping does not know: retried as transient until the kind's lifetime,
    then ``dropped`` / ``expired`` with this reply in the outcome."""
    return TransientSendError(
        "the provider answered an error mailguard does not know",
        reply=reply,
        reaction=Reaction(Action.RETRY),
    )
