"""Sealed progress: the counters a mail carries from run to run, which no caller can forge.

A deferred mail runs again with its :class:`~mailer.steps.Progress` (SMTP tries, backend
failures, bookings) in its task arguments. A caller who could pass those could reset the retry
budget or crash a run with junk, so they travel sealed: JSON plus an HMAC-SHA256 over the mail id
and the JSON, keyed by ``MAILGUARD_SECRET``. :func:`unseal` answers None for anything it did not
seal for that mail id (wrong key, another mail, tampered, malformed), never raises.

Without a secret a fixed public key is used: that seal stops junk, not someone who reads this
file. Set ``MAILGUARD_SECRET`` in production, the same on every worker.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

from mailer.steps import Progress

_UNKEYED = b"mailguard: progress seal, no secret configured"
#: Longest sealed value accepted, in characters (a real one is under 200).
MAX_SEALED = 512


def _key(secret: str | bytes | None) -> bytes:
    raw = secret.encode() if isinstance(secret, str) else (secret or _UNKEYED)
    return hashlib.sha256(b"mailguard progress seal\0" + raw).digest()


def _tag(key: bytes, mail_id: str, body: bytes) -> str:
    mac = hmac.new(key, mail_id.encode("utf-8", "surrogatepass") + b"\0" + body, "sha256")
    return base64.urlsafe_b64encode(mac.digest()[:16]).decode().rstrip("=")


def seal(progress: Progress, mail_id: str, secret: str | bytes | None) -> str:
    """``progress`` as one string bound to ``mail_id``: ``<base64 JSON>.<tag>``."""
    body = json.dumps(progress.as_dict(), separators=(",", ":")).encode()
    encoded = base64.urlsafe_b64encode(body).decode().rstrip("=")
    return f"{encoded}.{_tag(_key(secret), mail_id, body)}"


def unseal(sealed: Any, mail_id: str, secret: str | bytes | None) -> Progress | None:
    """The progress :func:`seal` made for ``mail_id`` with ``secret``; None for anything else."""
    if not isinstance(sealed, str) or len(sealed) > MAX_SEALED or sealed.count(".") != 1:
        return None
    encoded, tag = sealed.split(".")
    try:
        body = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (ValueError, TypeError):
        return None
    if not hmac.compare_digest(tag, _tag(_key(secret), mail_id, body)):
        return None
    try:
        return Progress.from_dict(json.loads(body))
    except ValueError:
        return None
