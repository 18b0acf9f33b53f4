"""An ``smtplib`` or socket error read as a mailguard ``SendError``: transient or permanent, with
the reaction a fault of our own side asks for. For every transport that reaches SMTP
(:mod:`mailer.mail.transports.smtp`, Django's SMTP backend)."""

from __future__ import annotations

import smtplib
import ssl

from mailer.errors import PermanentSendError, SendError, TransientSendError
from mailer.mail.replies import Action, Reaction, temporary
from mailer.mail.transports.base import mask_addresses


def smtp_send_error(exc: BaseException, recipients: list[str], doing: str) -> SendError:
    """An ``smtplib`` or socket error as a transient or permanent ``SendError`` (``doing``
    names the step in its text; ``recipients`` are masked in it). Also for transports that reach
    SMTP through another library (Django's SMTP backend).

    A fault of our own side that every mail would meet carries the reaction ``HOLD_TRANSPORT``
    (the guard holds the transport, not the mail): a certificate the system does not trust, a
    TLS handshake refused (not a connection lost during it), a server without the STARTTLS or
    AUTH we ask for; an authentication reply (``535``, ``534``, ``530``) gets it from its code
    (:func:`mailer.mail.replies.reaction_to_reply`)."""
    code: int | None = None
    text = ""
    reaction: Reaction | None = None
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        replies = list(exc.recipients.values())
        code, raw = max(replies, key=lambda r: r[0]) if replies else (550, b"")
        text = text_of(raw)
        transient = temporary(code)
        reason = f"{doing}: the server {'deferred' if transient else 'refused'} the recipient"
    elif isinstance(exc, smtplib.SMTPResponseException):
        code, text = exc.smtp_code, text_of(exc.smtp_error)
        transient = temporary(code)
        verb = "deferred" if transient else "refused"
        reason = f"{doing}: the server {verb} ({type(exc).__name__})"
    else:
        detail = f"{type(exc).__name__}: {exc}"
        # Missing STARTTLS, SMTPUTF8 or AUTH support, or an untrusted certificate, is a
        # configuration problem that a retry would only repeat.
        transient = isinstance(exc, smtplib.SMTPServerDisconnected) or not isinstance(
            exc, (smtplib.SMTPException, ssl.SSLCertVerificationError)
        )
        reason = f"{doing}: {detail}"
        lost = (ssl.SSLEOFError, ssl.SSLZeroReturnError)  # a connection lost, not refused
        refused_tls = isinstance(exc, ssl.SSLError) and not isinstance(exc, lost)
        missing = isinstance(exc, smtplib.SMTPNotSupportedError) and any(
            word in str(exc) for word in ("STARTTLS", "AUTH")
        )
        if refused_tls or missing:
            reaction = Reaction(Action.HOLD_TRANSPORT)
    reason = mask_addresses(reason, recipients)
    text = mask_addresses(text, recipients)
    error = TransientSendError if transient else PermanentSendError
    return error(reason, code=code, reply=text, reaction=reaction)


def text_of(raw: bytes | str) -> str:
    """An SMTP reply's text: bytes decoded as UTF-8 (bad bytes replaced)."""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
