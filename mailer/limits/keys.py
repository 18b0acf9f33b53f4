"""Storage keys and mail-id tags: keyed hashes, so that no address is ever stored in clear.

A subject key (usually a normalised address) becomes ``<namespace>:{<hash>}``: a 96-bit keyed
BLAKE2b of the policy name and the key, base64url. The braces are a Redis Cluster hash tag, so
everything about one subject lives in one slot. A mail id becomes a 48-bit integer tag.
"""

from __future__ import annotations

import binascii
import hashlib

#: Keys longer than this many characters are refused (an address has at most 254).
MAX_KEY_LENGTH = 1024
#: Mail ids longer than this many characters are refused (a UUID has 36).
MAX_MAIL_ID_LENGTH = 255

_UNKEYED = b"mailguard: no secret configured"
#: base64 to base64url (what ``base64.urlsafe_b64encode`` does, without its two calls).
_URLSAFE = bytes.maketrans(b"+/", b"-_")
#: Storage keys a hasher remembers (a recipient mailed again is not hashed again); the memo is
#: emptied when full: at most this many keys, about 200 bytes each.
KEY_MEMO = 4096


class KeyHasher:
    """Turns subject keys into storage keys with a secret, so stored keys reveal nothing.

    Without a ``secret`` a fixed public key is used: the stored hash still hides the address
    from a casual reader but can be confirmed by anyone who guesses it. Set a secret in
    production (``MAILGUARD_SECRET``), the same on every worker.
    """

    __slots__ = ("_base", "_memo", "_prefix")

    def __init__(self, secret: str | bytes | None, namespace: str, policy_name: str) -> None:
        if not namespace or any(c in namespace for c in "{}\0\r\n "):
            raise ValueError(f"bad namespace {namespace!r}: no spaces or braces")
        raw = secret.encode() if isinstance(secret, str) else (secret or _UNKEYED)
        key = raw if len(raw) <= 64 else hashlib.blake2b(raw).digest()
        person = hashlib.blake2b(policy_name.encode(), digest_size=16).digest()
        # Keyed once; each digest copies this state (cheaper than keying anew).
        self._base = hashlib.blake2b(digest_size=12, key=key, person=person)
        self._prefix = namespace + ":{"
        self._memo: dict[str, str] = {}

    def digest(self, key: str) -> bytes:
        """Return the 12-byte keyed hash of a validated ``key``."""
        state = self._base.copy()
        state.update(key.encode("utf-8", "surrogatepass"))
        return state.digest()

    def storage_key(self, key: str) -> str:
        """Return the storage key for ``key``: ``<namespace>:{<16 base64url chars>}``.
        Remembered (:data:`KEY_MEMO`): a key hashed before costs one dict lookup."""
        stored = self._memo.get(key)
        if stored is not None:
            return stored
        state = self._base.copy()  # digest() inlined: the hot path of every decision
        state.update(key.encode("utf-8", "surrogatepass"))
        b64 = binascii.b2a_base64(state.digest(), newline=False).translate(_URLSAFE)
        stored = self._prefix + b64.decode() + "}"
        if len(self._memo) >= KEY_MEMO:
            self._memo.clear()  # bounded; a thread reading meanwhile just hashes again
        self._memo[key] = stored
        return stored


def check_key(key: object) -> str:
    """Return ``key`` if it is a usable subject key, else raise ``ValueError`` saying why."""
    if not isinstance(key, str):
        raise ValueError(f"limiter key must be a str, got {type(key).__name__}")
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"limiter key must have 1 to {MAX_KEY_LENGTH} characters, got {len(key)}")
    return key


def mail_tag(mail_id: str | None) -> int:
    """Return the 48-bit tag of ``mail_id`` (never 0), or 0 for ``None``.

    Two different mail ids share a tag with probability 2**-48; within one key's log of at most
    max(limit) entries that is about 4e-14 per acquire for the reference policy.
    """
    if mail_id is None:
        return 0
    if not isinstance(mail_id, str) or not mail_id or len(mail_id) > MAX_MAIL_ID_LENGTH:
        raise ValueError(f"mail_id must be a str of 1 to {MAX_MAIL_ID_LENGTH} characters")
    tag = int.from_bytes(hashlib.blake2b(mail_id.encode(), digest_size=6).digest(), "big")
    return tag or 1
