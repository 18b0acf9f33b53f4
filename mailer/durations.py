"""Durations (``300``, ``5m``, ``24h``, ``1d``, ``500ms``) and sizes (``10MB``) written by people,
and durations written for people (:func:`human`).

>>> parse_duration("5m"), parse_duration("500ms"), parse_duration("90")
(300.0, 0.5, 90.0)
>>> human(0.25), human(42), human(125), human(2_592_000), human(5400)
('0.25s', '42s', '2m 5s', '30d', '1h 30m')
"""

from __future__ import annotations

import itertools
import math
import re

_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_RE = re.compile(r"^\s*(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(?P<unit>[a-z]*)\s*$")


def parse_duration(text: str) -> float:
    """Return the duration ``text`` in seconds.

    A non-negative number with an optional unit among ``ms, s, m, h, d``; no unit means
    seconds. One number and one unit only (``1h30m`` is refused; write ``90m``). Raises
    ``ValueError`` saying what is wrong; for configuration, not for per-mail input.
    """
    if not isinstance(text, str):
        raise ValueError(f"duration must be a str, got {type(text).__name__}")
    match = _DURATION_RE.match(text.lower())
    if match is None:
        raise ValueError(
            f"bad duration {text.strip()[:40]!r}: expected a number with an optional unit "
            "(ms, s, m, h, d) such as '300', '5m' or '24h'"
        )
    unit = match["unit"] or "s"
    if unit not in _UNITS_S:
        raise ValueError(
            f"bad duration {text.strip()[:40]!r}: unknown unit {unit!r}, use ms, s, m, h or d"
        )
    seconds = float(match["num"]) * _UNITS_S[unit]
    if not math.isfinite(seconds):
        raise ValueError(f"bad duration {text.strip()[:40]!r}: too large")
    return seconds


_UNITS_B = {"": 1, "b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}
_SIZE_RE = re.compile(r"^\s*(?P<num>[0-9]{1,12})\s*(?P<unit>[a-z]*)\s*$")


def parse_size(text: str) -> int:
    """Return the size ``text`` in bytes: a whole number with an optional unit among ``B, KB,
    MB, GB`` (powers of 1024), such as ``1048576``, ``512KB`` or ``10MB``."""
    match = _SIZE_RE.match(text.lower()) if isinstance(text, str) else None
    if match is None or match["unit"] not in _UNITS_B:
        raise ValueError(
            f"bad size {str(text).strip()[:40]!r}: expected a whole number with an optional "
            "unit (B, KB, MB, GB) such as '10MB'"
        )
    return int(match["num"]) * _UNITS_B[match["unit"]]


#: The units :func:`human` writes, largest first: (seconds in one, its letter).
_SHOWN = ((86400, "d"), (3600, "h"), (60, "m"), (1, "s"))


def human(seconds: float) -> str:
    """``seconds`` for a person: ``0.25s``, ``42s``, ``2m 5s``, ``1h 30m``, ``30d``.

    Under 10 s: up to 3 significant digits. From a minute: the largest unit and the next one
    (left out when zero), rounded to that next unit. Negative durations get a ``-``; an
    infinite or NaN one is written as Python writes the float.
    """
    if not math.isfinite(seconds):
        return str(seconds)
    if seconds < 0:
        return "-" + human(-seconds)
    for (big, name), (small, small_name) in itertools.pairwise(_SHOWN):
        count = round(seconds / small)
        if count >= big // small:
            high, low = divmod(count, big // small)
            return f"{high}{name} {low}{small_name}" if low else f"{high}{name}"
    if seconds < 10:
        return f"{seconds:.3g}s"
    return f"{round(seconds)}s"
