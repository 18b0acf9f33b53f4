"""Anymail's errors as the guard's reactions, for every transport that sends through an Anymail
backend (``anymail``, and ``django`` with an Anymail ``MAILGUARD_DJANGO_BACKEND``).

========================================================  ========================================
Anymail error                                             reaction
========================================================  ========================================
``AnymailRecipientsRefused`` (the ESP rejected, or had    fail and suppress the recipient
suppressed, every recipient: Postmark's ``ErrorCode``
406 inactive recipient, an invalid ``To``)
``AnymailAPIError`` HTTP 429, or an answer that says      hold the sender
rate limit / throttling / too many requests
``AnymailAPIError`` without an answer (no connection, a   retry
timeout), HTTP 408 or 5xx
``AnymailAPIError`` HTTP 401 / 403                        hold the transport (its credentials
                                                          are refused), an error logged naming
                                                          the ESP and its settings
``AnymailAPIError`` any other 4xx (an invalid request:    fail this mail
Postmark's 422 with ``ErrorCode`` 300)
``AnymailUnsupportedFeature``, ``AnymailInvalidAddress``  fail this mail
any other ``AnymailError``                                retry (bounded), then fail
========================================================  ========================================

The error's reply is one line naming the ESP, Anymail's error and the ESP's answer
(``Postmark AnymailRequestsAPIError (HTTP 422): {"ErrorCode":300,...}``), recipient addresses
masked. Anymail is imported only when an error is classified.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mailer.errors import SendError
from mailer.mail.transports import provider
from mailer.mail.transports.base import mask_addresses

log = logging.getLogger("mailguard")

#: The longest ESP answer kept in a reply, in characters.
MAX_ANSWER = 400


def anymail_error(exc: Exception, recipients: list[str], esp: str) -> SendError | None:
    """``exc``'s reaction as a ``SendError`` (see the module), its reply masked of
    ``recipients``; ``esp`` names the ESP when the error does not (no answer came). None: not
    an Anymail error (or Anymail is not installed)."""
    try:
        from anymail import exceptions as anymail  # noqa: PLC0415 - optional
    except ImportError:
        return None
    if not isinstance(exc, anymail.AnymailError):
        return None
    reply = answer_of(exc, esp, recipients)
    if isinstance(exc, anymail.AnymailRecipientsRefused):
        return provider.refused_recipients(reply)
    if isinstance(exc, (anymail.AnymailUnsupportedFeature, anymail.AnymailInvalidAddress)):
        return provider.rejected(reply)
    if not isinstance(exc, anymail.AnymailAPIError):
        return provider.unknown(reply)
    status = exc.status_code if isinstance(exc.status_code, int) else None
    if status in (401, 403):
        log.error(
            "%s refuses the credentials (HTTP %d): fix the ANYMAIL_%s_* settings",
            esp_name(exc, esp),
            status,
            esp_name(exc, esp).upper().replace(" ", "_"),
        )
    return provider.http_error(status, reply)


def esp_name(exc: Exception, esp: str) -> str:
    """The ESP's name as Anymail writes it (``Postmark``), else ``esp``."""
    name = getattr(exc, "esp_name", None)
    return name if isinstance(name, str) and name else esp


def answer_of(exc: Exception, esp: str, recipients: list[str]) -> str:
    """One line: the ESP, Anymail's error, the HTTP status and the ESP's answer (its JSON
    compacted, at most :data:`MAX_ANSWER` characters), or the cause when no answer came;
    ``recipients`` masked (before the answer is cut, so no part of an address is left)."""
    status = getattr(exc, "status_code", None)
    head = f"{esp_name(exc, esp)} {type(exc).__name__}"
    if isinstance(status, int):
        head += f" (HTTP {status})"
    said = " ".join(str(arg) for arg in exc.args).strip()
    body = _body(getattr(exc, "response", None))
    cause = exc.__cause__
    if not body and cause is not None:
        body = f"{type(cause).__name__}: {cause}"
    detail = " ".join(part for part in (said, body) if part)
    detail = mask_addresses(" ".join(detail.split()), recipients)  # one line
    if len(detail) > MAX_ANSWER:
        detail = detail[: MAX_ANSWER - 1] + "…"
    return f"{head}: {detail}" if detail else head


def _body(response: Any) -> str:
    """The answer's body: its JSON compacted, else its text ('' without an answer)."""
    if response is None:
        return ""
    try:
        return json.dumps(response.json(), separators=(",", ":"), ensure_ascii=False)
    except (AttributeError, ValueError):
        text = getattr(response, "text", "")
        return text if isinstance(text, str) else ""
