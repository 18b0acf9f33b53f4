"""A gcra tier's backlog written straight into its Redis hash, as the scoped script stores it.

For benchmarks and tests that need a backlog of many thousand bookings without making as many
decisions: :func:`write_gcra_backlog` stores sorted bookings in the hash ``<base>:G<tier>``
(docs/explanation/limiter.md, "Storage (Redis)"), in pages and groups filled to the caps the
script's appends fill them to (``caps`` in ``lua/scoped/gcra_write.lua``), each summarised for
the tier's own view by :mod:`mailer.limits.gcra_runs` (what ``summarize`` and ``compose_run`` in
``lua/scoped/gcra_pages.lua`` compute); a share's view is made by the first decision that asks
for it, as for any hash. The limiter never calls this module; the script reads what it writes as a
hash it wrote itself (``tests/limits/test_gcra_backlog.py``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from mailer.limits.gcra_runs import Group, Page

__all__ = ["write_gcra_backlog"]

_TAGS = 1 << 48


def _caps(n: int) -> tuple[int, int]:
    """The most bookings a page and pages a group keep at ``n`` bookings (the script's caps)."""
    r = int(n ** (1 / 3))
    page, group = max(4, 2 * r), max(2, r // 2)
    return 2 * page, 2 * group


def _record(run: Page | Group, interval: int, c: int) -> tuple[int, int, int]:
    """A run's summary for the view ``(interval, c)`` as the hash keeps it: ``b``, ``g``,
    ``theta`` (all three set by a run's first emission: none is ``NONE``)."""
    theta = run.theta(interval, c)
    _, b, g = run.fold(interval)
    return b, g, theta


def write_gcra_backlog(
    client: Any,
    key: str,
    bookings: Sequence[tuple[int, int]],
    *,
    limit: int,
    window_ms: int,
    floor_us: int = 0,
    last: int = 0,
    px: int = 86_400_000,
) -> None:
    """Store ``bookings`` (``(µs, tag)``, sorted by time, at least one) as the gcra tier of
    ``limit`` per ``window_ms`` keeps them in its hash ``key`` (``<base>:G<tier>``, replaced
    whole, its appended tail ``<key>:t`` deleted), with the bucket's floor ``floor_us`` (µs, 0:
    none) and the tag of the mail that alone made it (0: none); the hash expires in ``px`` ms.
    ``client`` is a redis-py client."""
    times = [t for t, _ in bookings]
    if not times or times != sorted(times) or min(times) <= 0:
        raise ValueError("bookings: at least one, sorted, in epoch µs")
    if any(not 0 <= tag < _TAGS for _, tag in bookings):
        raise ValueError("bookings: tags of 48 bits")
    interval = -(-window_ms * 1000 // limit)
    c = (limit - 1) * interval
    size, per_group = _caps(len(bookings))
    pages = [
        Page([t for t, _ in bookings[k : k + size]], [g for _, g in bookings[k : k + size]])
        for k in range(0, len(bookings), size)
    ]
    fields: dict[str, bytes] = {}
    groups: list[tuple[int, ...]] = []
    next_id = 1
    for q in range(0, len(pages), per_group):
        group = Group(pages[q : q + per_group])
        gid, next_id = next_id, next_id + 1
        records = []
        for page in group.pages:
            pid, next_id = next_id, next_id + 1
            first, end = page.times[0], page.times[-1]
            summary = _record(page, interval, c)
            records.append(struct.pack(">7d", pid, first, end, len(page.times), *summary))
            fields[f"p{pid}"] = b"".join(
                t.to_bytes(7, "big") + tag.to_bytes(6, "big")
                for t, tag in zip(page.times, page.tags, strict=True)
            )
        fields[f"i{gid}"], fields[f"k{gid}"] = b"".join(records[:-1]), records[-1]
        first, end = group.pages[0].times[0], group.pages[-1].times[-1]
        summary = _record(group, interval, c)
        groups.append((gid, first, end, group.count, len(group.pages), *summary))
    packed = [struct.pack(">8d", *record) for record in groups]
    fields["i"], fields["j"] = b"".join(packed[:-1]), packed[-1]
    fields["h"] = f"{floor_us},{last},{len(bookings)},{next_id};{limit}".encode()
    client.delete(key, key + ":t")
    client.hset(key, mapping=fields)
    client.pexpire(key, px)
