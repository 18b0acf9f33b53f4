"""One-click unsubscribe (RFC 8058) for bulk kinds: the signed token, the headers, and what a
click does.

A kind with ``MAILGUARD_KIND_<NAME>_UNSUBSCRIBE=1`` is **bulk**: each of its mails carries

.. code-block:: text

    List-Unsubscribe: <https://example.org/unsubscribe/TOKEN>
    List-Unsubscribe-Post: List-Unsubscribe=One-Click

with ``MAILGUARD_UNSUBSCRIBE_URL`` as the base. The token names the recipient (the keyed hash
of the address, never the address), the sender and the kind, signed with ``MAILGUARD_SECRET``
(HMAC-SHA256, 128 bits): a token changed in any character does not verify. A verified click
unsubscribes the recipient from that sender's bulk kinds (a suppression entry with the reason
``unsubscribed``, until lifted); a later bulk mail of that sender to it ends ``dropped`` /
``unsubscribed``, while its other kinds (a login code) still go. The endpoint is
``workers.unsubscribe``. A bulk mail to several recipients goes without those who unsubscribed
and carries the first remaining recipient's token.

Not for transactional kinds: a login code or a receipt must not be unsubscribable.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

from mailer.records.reputation.base import sender_of
from mailer.records.suppression import Suppression, Suppressions

#: The header that asks for one-click (RFC 8058), and its only value.
POST_HEADER = ("List-Unsubscribe-Post", "List-Unsubscribe=One-Click")
#: The longest token read, in characters (a real one is about 100).
MAX_TOKEN = 600
_CONTEXT = b"mailguard unsubscribe v1\0"


class InvalidToken(ValueError):
    """A token that was not made with this secret, or was changed: nothing is unsubscribed."""


@dataclass(frozen=True)
class Claims:
    """What a token names: the recipient's keyed hash, the sender's address and the kind."""

    recipient: str
    sender: str
    kind: str


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    """The bytes ``text`` encodes, only when ``text`` is their one encoding by :func:`_b64`
    (no padding, no stray character, unused low bits zero); else ``ValueError``."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(raw) != text:
        raise ValueError("not the canonical base64url of its bytes")
    return raw


class Signer:
    """Makes and checks tokens with one secret (``MAILGUARD_SECRET``, the same everywhere)."""

    def __init__(self, secret: str | bytes) -> None:
        if not secret:
            raise ValueError("an unsubscribe token needs MAILGUARD_SECRET")
        self._key = secret.encode() if isinstance(secret, str) else secret

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, _CONTEXT + payload, hashlib.sha256).digest()[:16]

    def token(self, claims: Claims) -> str:
        """``<payload>.<signature>``, both base64url: URL-safe, no padding."""
        payload = "\n".join((claims.recipient, claims.sender, claims.kind)).encode()
        return f"{_b64(payload)}.{_b64(self._mac(payload))}"

    def verify(self, token: str) -> Claims:
        """The claims of ``token``; :class:`InvalidToken` for a forged, changed or malformed
        one (compared in constant time)."""
        if not isinstance(token, str) or len(token) > MAX_TOKEN or token.count(".") != 1:
            raise InvalidToken("not an unsubscribe token")
        head, _, signature = token.partition(".")
        try:
            payload, given = _unb64(head), _unb64(signature)
        except (binascii.Error, ValueError):
            raise InvalidToken("not an unsubscribe token") from None
        if not hmac.compare_digest(given, self._mac(payload)):
            raise InvalidToken("the token's signature does not match (forged or changed)")
        parts = payload.decode("utf-8", "replace").split("\n")
        if len(parts) != 3 or not all(parts):
            raise InvalidToken("the token names no recipient, sender and kind")
        return Claims(*parts)


class Unsubscribe:
    """The one-click unsubscribe of bulk kinds: tokens and headers for the guard, and the
    endpoint's :meth:`apply`. ``base_url`` is ``MAILGUARD_UNSUBSCRIBE_URL`` (a trailing ``/``
    is dropped); ``bulk`` the names of the bulk kinds."""

    def __init__(
        self,
        base_url: str,
        signer: Signer,
        suppressions: Suppressions,
        bulk: frozenset[str],
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.signer = signer
        self.suppressions = suppressions
        self.bulk = bulk

    def headers(self, limit_key: str, sender: str, kind: str) -> dict[str, str]:
        """The two RFC 8058 headers for a mail of ``kind`` from ``sender`` to the recipient
        whose normalised address is ``limit_key``."""
        claims = Claims(self.suppressions.hash_of(limit_key), sender_of(sender), kind)
        return {
            "List-Unsubscribe": f"<{self.base_url}/{self.signer.token(claims)}>",
            POST_HEADER[0]: POST_HEADER[1],
        }

    def apply(self, token: str) -> tuple[Claims, Suppression]:
        """Verify ``token`` and unsubscribe its recipient from its sender's bulk kinds.
        :class:`InvalidToken` (nothing changed); :class:`~mailer.errors.BackendUnavailable`
        when the ledger's Redis is down (answer 503: the mail client tries again)."""
        claims = self.signer.verify(token)
        return claims, self.suppressions.unsubscribe(claims.recipient, claims.sender)
