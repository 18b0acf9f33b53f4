"""The limiter's argument checks: each refuses a bad value with a ``ValueError`` saying why.

Times cross into the limiter as whole milliseconds: :func:`check_max_wait` and :func:`not_before_ms`
convert the seconds callers give, rounding so that no admission is ever early.
"""

from __future__ import annotations

import math

#: The longest ``max_wait`` a booking may reach, in seconds (7 days).
MAX_WAIT = 7 * 86_400.0
#: The most entries one key of a shared scope keeps by default (``MAILGUARD_MAX_BOOKINGS``).
MAX_BOOKINGS = 1_000_000
#: The longest tenant name, in characters.
MAX_TENANT_LENGTH = 64


def check_max_wait(max_wait: float) -> int:
    """``max_wait`` (seconds, 0 to :data:`MAX_WAIT`) as whole ms, rounded down."""
    if not 0 <= max_wait <= MAX_WAIT:  # also refuses NaN
        raise ValueError(f"max_wait must be between 0 and {MAX_WAIT:.0f} seconds, got {max_wait}")
    return int(max_wait * 1000)


def not_before_ms(not_before: float) -> int:
    """``not_before`` (epoch seconds) as the limiter's whole ms, rounded up (never early).

    Raises ``ValueError`` for a value that is not a finite number of epoch seconds.
    """
    if isinstance(not_before, bool) or not isinstance(not_before, (int, float)):
        raise ValueError(f"not_before must be epoch seconds, got {type(not_before).__name__}")
    if not 0 <= not_before < 1e11:  # also refuses NaN and infinities
        raise ValueError(f"not_before must be epoch seconds, got {not_before!r}")
    return math.ceil(not_before * 1000 - 1e-6)  # 1e-6 ms: float noise, not a real ms


def check_tenant(tenant: object) -> str | None:
    """Return ``tenant`` if it is None or 1-64 characters without control characters.

    Raises ``ValueError`` saying why otherwise (for ``send_mail.delay(..., tenant=...)``).
    """
    if tenant is None:
        return None
    if not isinstance(tenant, str) or not 1 <= len(tenant) <= MAX_TENANT_LENGTH:
        raise ValueError(f"tenant must be a str of 1 to {MAX_TENANT_LENGTH} characters")
    if tenant.isascii() and tenant.isprintable():
        return tenant  # the common case, without a loop over the characters
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in tenant):
        raise ValueError("tenant must not contain control characters")
    return tenant


def check_share(share: object) -> float:
    """Return ``share`` if it is a number in (0, 1], else raise ``ValueError`` saying so."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise ValueError(f"share must be a number in (0, 1], got {share!r}")
    return float(share)


def share_limit(limit: int, share: float) -> int:
    """The part of ``limit`` a kind with ``share`` in (0, 1] may fill: floor, at least 1."""
    return max(1, math.floor(limit * share + 1e-9))
