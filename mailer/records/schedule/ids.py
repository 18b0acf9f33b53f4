"""How a mail id is named in the Redis schedule: every reader and writer goes through here.

A mail id that is a UUID in its usual text form (36 characters, lowercase: Celery's task ids,
so most mails) is stored as 17 bytes, ``0xff`` and the UUID's 16 bytes; any other id as its
UTF-8 text. ``0xff`` never occurs in UTF-8, so the two never meet.

A sorted set member and a hash field of 17 bytes take a 24-byte allocation where 36 take 48:
about 48 B less a parked mail (its ``due`` member and its ``payloads`` field).
"""

from __future__ import annotations

import uuid

#: The first byte of a stored UUID (never in UTF-8 text).
MARK = b"\xff"


def stored(mail_id: str) -> bytes:
    """``mail_id`` as the schedule names it now."""
    if len(mail_id) == 36:
        try:
            parsed = uuid.UUID(mail_id)
        except ValueError:
            parsed = None
        if parsed is not None and str(parsed) == mail_id:
            return MARK + parsed.bytes
    return mail_id.encode()


def mail_id_of(name: bytes | str) -> str:
    """The mail id a schedule's member or field ``name`` stands for (a UUID's 17 bytes or an
    id's text)."""
    raw = name.encode() if isinstance(name, str) else bytes(name)
    if len(raw) == 17 and raw[:1] == MARK:
        return str(uuid.UUID(bytes=raw[1:]))
    return raw.decode()
