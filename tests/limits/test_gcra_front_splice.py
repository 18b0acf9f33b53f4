"""The gcra bookings' worst order on Redis (``benchmarks/limiter.py``, :data:`ORDERS`): mails of
the full tier booked into the room of a half-rate backlog, each near the front. Such a booking
changes one page before the last and one record of its group's page index: the script splices
the booking's 13 bytes into the page and that record into the page index as it read them,
instead of packing both whole again. Checked on the stored hash itself, decoded field by field
(``mailer/limits/stores/lua/scoped/gcra_store.lua``): after each booking every booking the
decisions made is stored once, in order, and a booking that cuts no page rewrote one page whose
new bytes are its old bytes with one record more, and at most one page record."""

from __future__ import annotations

import struct

import redis

from mailer import Limiter, ManualClock, Policy
from mailer.limits.stores.gcra_backlog import write_gcra_backlog

START = 1_700_000_000.0
WEEK = 7 * 86_400.0
#: The backlog: bookings at half of 14/s (the share's interval), written into the tier's hash.
COUNT, HALF = 5_000, -(-1_000_000 // 7)


def _pages(client: redis.Redis, key: str) -> tuple[dict[bytes, bytes], list[tuple[int, int]]]:
    """The hash's fields, and its bookings ``(µs, tag)`` read page by page in the order of the
    group index and each group's page index (one view: 8 doubles a group, 7 a page)."""
    fields: dict[bytes, bytes] = client.hgetall(key)  # type: ignore[assignment]
    index = fields[b"i"] + fields.get(b"j", b"")
    out = []
    for q in range(len(index) // 64):
        gid = int(struct.unpack_from(">d", index, 64 * q)[0])
        pidx = fields[b"i%d" % gid] + fields.get(b"k%d" % gid, b"")
        for p in range(len(pidx) // 56):
            pid, _, _, count = (int(v) for v in struct.unpack_from(">4d", pidx, 56 * p))
            raw = fields[b"p%d" % pid]
            if q == len(index) // 64 - 1 and p == len(pidx) // 56 - 1:
                raw += client.get(key + ":t") or b""  # type: ignore[operator]
            assert len(raw) == 13 * count
            for r in range(count):
                rec = raw[13 * r : 13 * r + 13]
                out.append((int.from_bytes(rec[:7], "big"), int.from_bytes(rec[7:], "big")))
    return fields, out


def _pages_changed(before: dict[bytes, bytes], after: dict[bytes, bytes]) -> list[bytes]:
    return [f for f in after if f.startswith(b"p") and before.get(f) != after[f]]


def test_front_bookings_splice_one_record_into_their_page_and_page_index(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    clock = ManualClock(START)
    policy = Policy.parse("recipient: 1/60s; sender: 14/1s gcra", name="recipient")
    limiter = Limiter.from_url(redis_url, policy, clock=clock, secret="s", namespace="splice")
    base = limiter.storage_key("sender", "sender")
    first_us = (int(START * 1000) + 1) * 1000
    backlog = [(-(-(first_us + i * HALF) // 1000) * 1000, i + 1) for i in range(COUNT)]
    write_gcra_backlog(client, base + ":G1", backlog, limit=14, window_ms=1000)
    try:
        booked = []
        for i in range(8):  # takes the room at now
            d = limiter.acquire(f"w{i}@news.example", max_wait=WEEK)
            if d.booked:
                booked.append(d.at_ms * 1000)
        fields, _ = _pages(client, base + ":G1")
        spliced = 0
        for i in range(60):
            d = limiter.acquire(f"b{i}@news.example", max_wait=WEEK)
            if d.allowed:  # the burst's room at now: into the floor, no page
                continue
            assert d.booked and d.at_ms * 1000 < backlog[COUNT // 4][0], "near the front"
            booked.append(d.at_ms * 1000)
            after, now_stored = _pages(client, base + ":G1")
            assert sorted(us for us, _ in now_stored) == sorted(
                [us for us, _ in backlog] + booked
            ), "every booking stored once, in order"
            assert [us for us, _ in now_stored] == sorted(us for us, _ in now_stored)
            changed = _pages_changed(fields, after)
            if set(after) == set(fields):  # no page cut: one page and one page record changed
                assert len(changed) == 1, changed
                old, new = fields[changed[0]], after[changed[0]]
                assert len(new) == len(old) + 13
                at = next(k for k in range(0, len(new), 13) if new[k : k + 13] != old[k : k + 13])
                assert new[:at] + new[at + 13 :] == old
                for name in after:
                    if name[:1] == b"i" and name != b"i" and name in fields:
                        diff = sum(
                            after[name][k : k + 56] != fields[name][k : k + 56]
                            for k in range(0, len(after[name]), 56)
                        )
                        assert len(after[name]) == len(fields[name]) and diff <= 1
                spliced += 1
            fields = after
        assert spliced >= 40, "most front bookings cut no page"
    finally:
        limiter.close()
        client.close()
