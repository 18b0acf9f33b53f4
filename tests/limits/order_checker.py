"""An independent checker of a recipient's order and pace, from what was sent and when.

It knows nothing of the limiter: given each mail's place in the order it was sent (its
``delay()`` order) and when it left, it says which pairs left out of order, and which windows
of the policy held more mails than their limit. Shared by the limiter, guard and worker tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def out_of_order(sent_at: Mapping[int, float]) -> list[tuple[int, int]]:
    """The pairs ``(earlier, later)`` of places in the sending order whose mails left the
    other way round (the later one strictly first), given each place's time of leaving."""
    places = sorted(sent_at)
    return [
        (a, b) for i, a in enumerate(places) for b in places[i + 1 :] if sent_at[b] < sent_at[a]
    ]


def over_limit(
    times: Sequence[float], tiers: Sequence[tuple[int, float]], slack: float = 0.0
) -> list[tuple[int, float, float]]:
    """Every ``(limit, window, start)`` where the window of ``window`` seconds from ``start``
    (a time of leaving) holds more than ``limit`` of ``times`` (``slack``: seconds a window is
    shortened by, for times measured outside the limiter's clock)."""
    ordered = sorted(times)
    found = []
    for limit, window in tiers:
        for i, start in enumerate(ordered):
            inside = [t for t in ordered[i:] if t < start + window - slack]
            if len(inside) > limit:
                found.append((limit, window, start))
    return found
