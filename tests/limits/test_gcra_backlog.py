"""A gcra backlog written by :func:`mailer.limits.stores.gcra_backlog.write_gcra_backlog` is a
hash as the scoped script writes it: the bookings real decisions made, copied into another
sender scope with it, read back the same, and the next decisions (booked at the end, inserted
at the front, with and without a share, released, peeked) answer on the copy as on the
original."""

from __future__ import annotations

import struct
import uuid

import pytest
import redis

from mailer import Limiter, ManualClock, Policy
from mailer.limits.stores.gcra_backlog import write_gcra_backlog

START = 1_700_000_000.0
WEEK = 7 * 86_400.0
POLICY = "recipient: 1/60s; sender: 14/1s gcra"


def _stored(client: redis.Redis, key: str) -> tuple[list[int], list[tuple[int, int]]]:
    """The hash's header numbers (floor, last, bookings) and its bookings ``(µs, tag)`` read
    page by page in the order of the group index and each group's page index."""
    fields: dict[bytes, bytes] = client.hgetall(key)  # type: ignore[assignment]
    head, views = fields[b"h"].split(b";")
    per = 5 + 3 * len(views.split(b","))
    index = fields[b"i"] + fields[b"j"]
    out = []
    for q in range(len(index) // (8 * per)):
        gid = int(struct.unpack_from(">d", index, 8 * per * q)[0])
        pidx = fields[b"i%d" % gid] + fields[b"k%d" % gid]
        for p in range(len(pidx) // (8 * (per - 1))):
            pid, _, _, count = (int(v) for v in struct.unpack_from(">4d", pidx, 8 * (per - 1) * p))
            raw = fields[b"p%d" % pid]
            if 8 * per * (q + 1) == len(index) and 8 * (per - 1) * (p + 1) == len(pidx):
                raw += client.get(key + ":t") or b""  # type: ignore[operator]
            assert len(raw) == 13 * count
            out += [
                (int.from_bytes(raw[k : k + 7], "big"), int.from_bytes(raw[k + 7 : k + 13], "big"))
                for k in range(0, len(raw), 13)
            ]
    return [int(v) for v in head.split(b",")[:3]], out


def _limiter(redis_url: str, clock: ManualClock) -> Limiter:
    return Limiter.from_url(
        redis_url,
        Policy.parse(POLICY),
        clock=clock,
        secret="s",
        namespace=f"backlog-{uuid.uuid4().hex[:8]}",
    )


@pytest.mark.parametrize("count", [1, 40, 700])
def test_a_written_backlog_answers_as_the_one_decisions_wrote(redis_url: str, count: int) -> None:
    client = redis.Redis.from_url(redis_url)
    clock = ManualClock(START)
    original, copy = _limiter(redis_url, clock), _limiter(redis_url, clock)
    try:
        for i in range(count + 7):  # the share's burst admitted now, then booked
            original.acquire(f"n{i}@news.example", mail_id=f"n{i}", max_wait=WEEK, share=0.5)
        key = original.storage_key("sender", "sender") + ":G1"
        (floor, last, n), bookings = _stored(client, key)
        assert n == len(bookings) == count
        copied = copy.storage_key("sender", "sender") + ":G1"
        write_gcra_backlog(
            client, copied, bookings, limit=14, window_ms=1000, floor_us=floor, last=last
        )
        assert _stored(client, copied) == _stored(client, key)
        answers = []
        for limiter in (original, copy):
            got = []
            for i in range(30):
                to, mail = f"b{i}@example.com", f"b{i}"
                share = 0.5 if i % 3 else 1.0
                d = limiter.acquire(to, mail_id=mail, max_wait=WEEK, share=share)
                got.append((d.allowed, d.booked, d.at_ms, d.remaining))
                if i % 7 == 3:
                    got.append(limiter.release(to, mail))
                peek = limiter.peek("p@example.com", share=share)
                got.append((peek.at_ms, peek.remaining))
            answers.append((got, _stored(client, limiter.storage_key("sender", "sender") + ":G1")))
        assert answers[0] == answers[1]
    finally:
        original.close()
        copy.close()
        client.close()


def _records(fields: dict[bytes, bytes]) -> list[object]:
    """The hash's groups and pages in order, ids left out: per group its record, then per page
    its record and its bytes (one view: 8 doubles a group, 7 a page)."""
    index = fields[b"i"] + fields[b"j"]
    out: list[object] = []
    for q in range(0, len(index), 64):
        group = struct.unpack_from(">8d", index, q)
        out.append(group[1:])
        pidx = fields[b"i%d" % group[0]] + fields[b"k%d" % group[0]]
        for p in range(0, len(pidx), 56):
            page = struct.unpack_from(">7d", pidx, p)
            out += [page[1:], fields[b"p%d" % page[0]]]
    return out


@pytest.mark.parametrize("count", [1, 8, 9, 26])
def test_a_written_backlog_holds_the_records_appends_make(redis_url: str, count: int) -> None:
    """Up to 26 bookings the caps stay the same (pages of 8, groups of 4), so bookings made
    in order (appended, each page cut as the script cuts it) and the same bookings written
    are laid out alike: every group's and page's record and every page's bytes are equal, but
    for the ids; the header the same but for its next id."""
    client = redis.Redis.from_url(redis_url)
    clock = ManualClock(START)
    original, copy = _limiter(redis_url, clock), _limiter(redis_url, clock)
    try:
        for i in range(14 + count):  # the tier's burst admitted now, then booked in order
            original.acquire(f"n{i}@news.example", mail_id=f"n{i}", max_wait=WEEK)
        key = original.storage_key("sender", "sender") + ":G1"
        (floor, last, _), bookings = _stored(client, key)
        if client.exists(key + ":t"):  # the appended tail: into its page, as the writer has it
            original.acquire("cut@news.example", mail_id="cut", max_wait=WEEK)
            assert original.release("cut@news.example", "cut")
            (floor, last, _), bookings = _stored(client, key)
        assert len(bookings) == count and not client.exists(key + ":t")
        copied = copy.storage_key("sender", "sender") + ":G1"
        write_gcra_backlog(
            client, copied, bookings, limit=14, window_ms=1000, floor_us=floor, last=last
        )
        made: dict[bytes, bytes] = client.hgetall(key)  # type: ignore[assignment]
        written: dict[bytes, bytes] = client.hgetall(copied)  # type: ignore[assignment]
        assert _records(written) == _records(made)
        assert written[b"h"].split(b",")[:3] == made[b"h"].split(b",")[:3]
        assert written[b"h"].split(b";")[1] == made[b"h"].split(b";")[1] == b"14"
    finally:
        original.close()
        copy.close()
        client.close()


def test_bookings_out_of_order_or_none_are_refused(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    for bookings in ([], [(5, 1), (4, 2)], [(5, 1 << 48)]):
        with pytest.raises(ValueError, match="bookings"):
            write_gcra_backlog(client, "refused:G1", bookings, limit=14, window_ms=1000)
    assert client.exists("refused:G1") == 0
    client.close()
