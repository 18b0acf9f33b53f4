"""Limiter benchmark: a program, not a test. Run with ``make bench``; prints one table.

Every figure is measured in this run, contenders interleaved round by round, and given as a
ratio to a floor measured on the same connection in the same rounds:

- Redis decisions/s and p50/p99, for one hot key (mostly refused) and for 10 000 distinct keys
  (mostly admitted), against a no-op ``EVALSHA`` round trip (``return 0``, one key).
- Redis bytes per key with a full reference-policy log (10 admissions): ``MEMORY USAGE`` and the
  ``used_memory`` delta over 10 000 keys; a plain sorted-set log of the same content for scale.
- Memory backend decisions/s, one thread, reference policy over 10 000 keys, against a floor of
  one locked dict lookup per call.
- ``acquire_many`` of 100 keys against 100 single ``acquire`` calls.
- Per sender tier (sliding and gcra ``14/1s``), the time of one decision after N bookings of a
  newsletter (share 0.5, a week's wait) in the sender scope, N = 10 to 100 000, as ratios to
  the time at 10, with the bytes the sender scope's keys hold and the server's time per script
  call (``INFO commandstats``); and for ``memory://`` under ``sender: 14/1s gcra`` (the paged
  search of :mod:`mailer.limits.gcra_search`). Then, at 10 and 100 000 bookings, the time per
  decision in each booking order of :data:`ORDERS` (Redis: the server's; memory: the call's),
  as ratios 100 000 / 10, and the worst order's ratio. In the worst order (share-1.0 mails
  inserted into the room at the front of a half-rate backlog) the mails at 10 bookings are
  appended after the first few, so that order is timed again with an insertion at both sizes
  (:data:`FRONT_ORDER`), and the worst ratio of the same operation at both sizes is printed
  too. ``--backlog`` runs only these gcra rows.
- The scoped decision's lower bound: a script that makes only the Redis calls a scoped decision
  cannot do without (``TIME``, one ``MGET`` of the three scopes' keys, the three writes) and
  returns a reply of the same size, with no decision at all: what one script call with these
  writes costs on this machine, whatever its Lua. The scoped row's target is its ratio to this
  lower bound (>= 0.80, same rounds); its ratio to the no-op floor is shown for information.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable

import redis

from devservers.redis_servers import RedisServer
from mailer import Limiter, ManualClock, Policy
from mailer.limits.checks import MAX_WAIT
from mailer.limits.policy import REFERENCE_POLICY
from mailer.limits.stores.gcra_backlog import write_gcra_backlog

ROUNDS = 5
#: Backlog sizes of the "decision after N bookings in the sender scope" rows.
BACKLOGS = (10, 1_000, 10_000, 100_000)
CALLS_PER_ROUND = 2_000
DISTINCT_KEYS = 10_000
POLICY = Policy.parse(REFERENCE_POLICY, name="recipient")
#: The Redis calls a scoped decision (recipient log, sender gcra, tenant fixed) cannot do
#: without, and a reply of its size: no decision.
BARE_SCOPED = """
local t = redis.call('TIME')
local f = KEYS[3] .. ':f1:' .. ARGV[1]
redis.call('MGET', KEYS[1] .. ':l', KEYS[2] .. ':g1', f)
redis.call('SET', KEYS[1] .. ':l', ARGV[2], 'PX', 86400000)
redis.call('SET', KEYS[2] .. ':g1', ARGV[3], 'PX', 1000)
if redis.call('INCR', f) == 1 then redis.call('PEXPIRE', f, 2592000000) end
return {1, 0, tonumber(t[1]) * 1000, 0, 0, 0, 0, 4, 9, 99999, 999999899}
"""
#: Recipient + sender (gcra) + tenant (fixed), quotas large enough that distinct keys go through.
SCOPED_POLICY = Policy.parse(
    f"recipient: {REFERENCE_POLICY}; sender: 100000/1s gcra; tenant: 1000000000/30d fixed",
    name="recipient",
)


def _timed(call: Callable[[int], object], count: int, offset: int = 0) -> list[float]:
    out = []
    clock = time.perf_counter
    for i in range(offset, offset + count):
        start = clock()
        call(i)
        out.append(clock() - start)
    return out


def _summary(latencies: list[float]) -> tuple[float, float, float]:
    qs = statistics.quantiles(latencies, n=100)
    return len(latencies) / sum(latencies), qs[49] * 1e6, qs[98] * 1e6


def bench_redis_decisions(url: str) -> list[tuple[str, float, float, float]]:
    client = redis.Redis.from_url(url)
    noop = client.script_load("return 0")
    hot = Limiter.from_url(url, POLICY, secret="bench", namespace="hot")
    distinct = Limiter.from_url(url, POLICY, secret="bench", namespace="distinct")
    scoped = Limiter.from_url(url, SCOPED_POLICY, secret="bench", namespace="scoped")
    hot_key = "hot@example.com"
    keys = [f"user{i}@example.com" for i in range(DISTINCT_KEYS * ROUNDS)]
    hot.acquire(hot_key)  # from now on the hot key is refused (1 per minute)
    bare = client.script_load(BARE_SCOPED)
    sender = scoped.storage_key("sender", "sender")
    tenant = scoped.storage_key("tenant", "acme")
    log = (1_700_000_000_000).to_bytes(6, "big") + bytes(10)  # one entry, as packed
    samples: dict[str, list[float]] = {
        "floor": [],
        "hot": [],
        "distinct": [],
        "scoped": [],
        "bare": [],
    }
    for r in range(ROUNDS):
        samples["floor"] += _timed(lambda i: client.evalsha(noop, 1, hot_key), CALLS_PER_ROUND)
        samples["hot"] += _timed(lambda i: hot.acquire(hot_key), CALLS_PER_ROUND)
        samples["distinct"] += _timed(
            lambda i: distinct.acquire(keys[i]), CALLS_PER_ROUND, offset=r * DISTINCT_KEYS
        )
        samples["scoped"] += _timed(
            lambda i: scoped.acquire(keys[i], tenant="acme"),
            CALLS_PER_ROUND,
            offset=r * DISTINCT_KEYS,
        )
        samples["bare"] += _timed(
            lambda i: client.evalsha(
                bare,
                3,
                scoped.storage_key("recipient", keys[i]),
                sender,
                tenant,
                1_700_000_000_000,
                log,
                1_700_000_000_000_000 + i,
            ),
            CALLS_PER_ROUND,
            offset=r * DISTINCT_KEYS + CALLS_PER_ROUND,
        )
    scoped.close()
    hot.close()
    distinct.close()
    client.close()
    return [(name, *_summary(lat)) for name, lat in samples.items()]


def _sender_backlog(url: str, tier: str, count: int, namespace: str) -> Limiter:
    """A limiter under ``sender: <tier>`` whose sender scope holds ``count`` bookings of a
    newsletter (share 0.5, distinct readers, a week's wait), booked by real decisions; a gcra
    bucket's bookings are written into its hash as the limiter stores them
    (:func:`~mailer.limits.stores.gcra_backlog.write_gcra_backlog`: quicker than 100 000
    decisions)."""
    clock = ManualClock(1_700_000_000.0)
    policy = Policy.parse(f"recipient: 1/60s; sender: {tier}", name="recipient")
    limiter = Limiter.from_url(url, policy, clock=clock, secret="bench", namespace=namespace)
    if tier.endswith("gcra") and count > 100:
        client = redis.Redis.from_url(url)
        start = 1_700_000_000_000 + 1
        step = -(-1_000_000 // 7)  # half of 14/s: the share's interval, µs
        bookings = [(-(-(start * 1000 + i * step) // 1000) * 1000, i + 1) for i in range(count)]
        key = limiter.storage_key("sender", "sender") + ":G1"
        write_gcra_backlog(client, key, bookings, limit=14, window_ms=1000)
        client.close()
        limiter.peek("warm@news.example", share=0.5)  # the share's view made, once
        return limiter
    for i in range(count):
        limiter.acquire(f"n{i}@news.example", mail_id=f"n{i}", max_wait=MAX_WAIT, share=0.5)
    return limiter


def bench_backlog(
    url: str, counts: tuple[int, ...], tiers: tuple[str, ...] = ("14/1s", "14/1s gcra")
) -> list[tuple[str, int, float, int, float]]:
    """Per sender tier and backlog size: the median time of one decision (a newsletter mail,
    share 0.5, booked at the end, once the room at the front is taken), the bytes the sender
    scope's keys hold, and the server's µs per ``EVALSHA`` over the timed calls (``INFO
    commandstats``, reset before them: less noisy than the round trip)."""
    client = redis.Redis.from_url(url)
    out = []
    for tier in tiers:
        for count in counts:
            namespace = f"backlog-{uuid.uuid4().hex[:8]}"
            limiter = _sender_backlog(url, tier, count, namespace)
            for i in range(8):  # the room at the front taken: every timed mail books the end
                limiter.acquire(f"w{i}@news.example", max_wait=MAX_WAIT, share=0.5)
            rounds = 200
            client.config_resetstat()
            times = _timed(
                lambda i, lim=limiter: lim.acquire(
                    f"b{i}@news.example", mail_id=f"b{i}", max_wait=MAX_WAIT, share=0.5
                ),
                rounds,
            )
            server = client.info("commandstats")["cmdstat_evalsha"]["usec_per_call"]
            base = limiter.storage_key("sender", "sender")
            size = sum(client.memory_usage(k) or 0 for k in client.scan_iter(match=base + ":*"))
            out.append((tier, count, statistics.median(times), size, float(server)))
            limiter.close()
            client.flushall()
    client.close()
    return out


#: Booking orders of the "server time per decision, order" rows: the backlog's spacing (µs,
#: written into the tier's hash as in :func:`_sender_backlog`) and the share of the mails
#: then booked: at the end of a full-rate backlog, into the room of a half-rate one (each mail
#: inserted near the front), at the end of a half-rate one at the share's rate.
ORDERS = (
    ("full-rate backlog, share 1.0 booked at the end", -(-1_000_000 // 14), 1.0),
    ("half-rate backlog, share 1.0 inserted at the front", -(-1_000_000 // 7), 1.0),
    ("half-rate backlog, share 0.5 booked at the end", -(-1_000_000 // 7), 0.5),
)


#: The mails timed per order and backlog size, in rounds of :data:`ORDER_BATCH`: the two
#: sizes take turns, so a busy machine weighs on both alike.
ORDER_MAILS, ORDER_BATCH = 300, 50


def bench_orders(url: str, counts: tuple[int, int]) -> list[tuple[str, float, float]]:
    """Per order of :data:`ORDERS` under ``sender: 14/1s gcra``: the server's µs per decision
    (``INFO commandstats``, :data:`ORDER_MAILS` mails) after ``counts[0]`` and ``counts[1]``
    bookings, the two backlogs taking turns in rounds of :data:`ORDER_BATCH` mails."""
    client = redis.Redis.from_url(url)
    policy = Policy.parse("recipient: 1/60s; sender: 14/1s gcra", name="recipient")
    out = []
    for name, step, share in ORDERS:
        limiters = []
        for count in counts:
            clock = ManualClock(1_700_000_000.0)
            namespace = f"order-{uuid.uuid4().hex[:8]}"
            limiter = Limiter.from_url(url, policy, clock=clock, secret="b", namespace=namespace)
            start = 1_700_000_000_000 + 1
            bookings = [(-(-(start * 1000 + i * step) // 1000) * 1000, i + 1) for i in range(count)]
            key = limiter.storage_key("sender", "sender") + ":G1"
            write_gcra_backlog(client, key, bookings, limit=14, window_ms=1000)
            for i in range(8):  # takes the room at now
                limiter.acquire(f"w{i}@news.example", max_wait=MAX_WAIT, share=share)
            limiters.append(limiter)
        usec, calls = [0.0, 0.0], [0, 0]
        for batch in range(0, ORDER_MAILS, ORDER_BATCH):
            for k, limiter in enumerate(limiters):
                client.config_resetstat()
                for i in range(batch, batch + ORDER_BATCH):
                    limiter.acquire(f"b{i}@news.example", max_wait=MAX_WAIT, share=share)
                stats = client.info("commandstats")["cmdstat_evalsha"]
                usec[k] += float(stats["usec"])
                calls[k] += int(stats["calls"])
        for limiter in limiters:
            limiter.close()
        client.flushall()
        out.append((name, usec[0] / calls[0], usec[1] / calls[1]))
    client.close()
    return out


#: The front order timed as the same operation at both sizes: at 10 bookings the room at the
#: front of a half-rate backlog takes a few mails only (the next ones are appended after its
#: last booking, summaries carried one step), so every FRONT_MAILS timed mails get a fresh
#: backlog of 10, built untimed, FRONT_WARM mails taking the room at now first (Redis: its
#: bucket's burst; memory: as in :func:`bench_memory_orders`). Each timed mail is checked to be
#: booked before the backlog's last booking.
FRONT_WARM, FRONT_MAILS = {"redis": 13, "memory": 8}, {"redis": 6, "memory": 2}
FRONT_ORDER = "half-rate backlog, share 1.0 inserted at the front, an insertion at both sizes"


def _front_redis(url: str, client: redis.Redis, count: int) -> tuple[Limiter, int]:
    """A limiter whose sender scope holds ``count`` bookings at the half rate (written into the
    tier's hash as in :func:`bench_orders`) and whose room at now is taken; with the ms of its
    last booking."""
    policy = Policy.parse("recipient: 1/60s; sender: 14/1s gcra", name="recipient")
    namespace = f"front-{uuid.uuid4().hex[:8]}"
    limiter = Limiter.from_url(
        url, policy, clock=ManualClock(1_700_000_000.0), secret="b", namespace=namespace
    )
    start, step = (1_700_000_000_000 + 1) * 1000, -(-1_000_000 // 7)
    bookings = [(-(-(start + i * step) // 1000) * 1000, i + 1) for i in range(count)]
    key = limiter.storage_key("sender", "sender") + ":G1"
    write_gcra_backlog(client, key, bookings, limit=14, window_ms=1000)
    for i in range(FRONT_WARM["redis"]):
        limiter.acquire(f"w{i}@news.example", max_wait=MAX_WAIT)
    return limiter, -(-(start + (count - 1) * step) // 1000)


def _inserted(limiter: Limiter, last_ms: int, names: range) -> None:
    """Book one share-1.0 mail per name, each checked to go before ``last_ms``."""
    for i in names:
        decision = limiter.acquire(f"b{i}@news.example", max_wait=MAX_WAIT)
        assert decision.booked and decision.at_ms < last_ms, (decision, last_ms)


def bench_front_inserts(url: str, counts: tuple[int, int]) -> tuple[str, float, float]:
    """:data:`FRONT_ORDER` on Redis: the server's µs per decision (``INFO commandstats``,
    :data:`ORDER_MAILS` mails), ``counts[0]`` and ``counts[1]`` bookings taking turns in rounds
    of :data:`ORDER_BATCH` mails, every timed mail an insertion (at ``counts[0]``, a fresh
    backlog every ``FRONT_MAILS`` mails)."""
    client = redis.Redis.from_url(url)
    large, large_last = _front_redis(url, client, counts[1])
    usec, calls = [0.0, 0.0], [0, 0]
    per = FRONT_MAILS["redis"]
    for batch in range(0, ORDER_MAILS, ORDER_BATCH):
        for k in (0, 1):
            for first in range(batch, batch + ORDER_BATCH, per if k == 0 else ORDER_BATCH):
                if k == 0:
                    limiter, last = _front_redis(url, client, counts[0])
                else:
                    limiter, last = large, large_last
                client.config_resetstat()
                _inserted(limiter, last, range(first, first + (per if k == 0 else ORDER_BATCH)))
                stats = client.info("commandstats")["cmdstat_evalsha"]
                usec[k] += float(stats["usec"])
                calls[k] += int(stats["calls"])
                if k == 0:
                    limiter.close()
    large.close()
    client.flushall()
    client.close()
    return FRONT_ORDER, usec[0] / calls[0], usec[1] / calls[1]


def bench_memory_front_inserts(counts: tuple[int, int]) -> tuple[str, float, float]:
    """:data:`FRONT_ORDER` in ``memory://``: the median µs of one decision, as
    :func:`bench_front_inserts` (the backlog booked by real decisions at share 0.5)."""
    policy = Policy.parse("recipient: 1/60s; sender: 14/1s gcra", name="recipient")

    def backlog(count: int) -> tuple[Limiter, int]:
        limiter = Limiter.from_url(
            "memory://", policy, clock=ManualClock(1_700_000_000.0), secret="b"
        )
        last = 0
        for i in range(count):
            last = limiter.acquire(f"n{i}@news.example", max_wait=MAX_WAIT, share=0.5).at_ms
        for i in range(FRONT_WARM["memory"]):
            limiter.acquire(f"w{i}@news.example", max_wait=MAX_WAIT)
        return limiter, last

    large, large_last = backlog(counts[1])
    times: list[list[float]] = [[], []]
    per = FRONT_MAILS["memory"]
    for batch in range(0, ORDER_MAILS, ORDER_BATCH):
        for first in range(batch, batch + ORDER_BATCH, per):
            small, last = backlog(counts[0])
            times[0] += _timed(
                lambda i, lim=small, at=last: _inserted(lim, at, range(i, i + 1)), per, first
            )
            small.close()
        times[1] += _timed(
            lambda i: _inserted(large, large_last, range(i, i + 1)), ORDER_BATCH, batch
        )
    large.close()
    small_us, large_us = (statistics.median(t) * 1e6 for t in times)
    return FRONT_ORDER, small_us, large_us


def bench_memory_orders(counts: tuple[int, int]) -> list[tuple[str, float, float]]:
    """Per order of :data:`ORDERS` under ``sender: 14/1s gcra`` in ``memory://``: the median
    µs of one decision (:data:`ORDER_MAILS` mails, the two sizes taking turns as in
    :func:`bench_orders`) after ``counts[0]`` and ``counts[1]`` bookings, the backlog booked
    by real decisions at its spacing (share 1.0: the full rate, 0.5: half of it)."""
    policy = Policy.parse("recipient: 1/60s; sender: 14/1s gcra", name="recipient")
    out = []
    for name, step, share in ORDERS:
        backlog_share = 1.0 if step == -(-1_000_000 // 14) else 0.5
        limiters = []
        for count in counts:
            clock = ManualClock(1_700_000_000.0)
            limiter = Limiter.from_url("memory://", policy, clock=clock, secret="b")
            for i in range(count):
                limiter.acquire(f"n{i}@news.example", max_wait=MAX_WAIT, share=backlog_share)
            for i in range(8):
                limiter.acquire(f"w{i}@news.example", max_wait=MAX_WAIT, share=share)
            limiters.append(limiter)
        times: list[list[float]] = [[], []]
        for batch in range(0, ORDER_MAILS, ORDER_BATCH):
            for k, limiter in enumerate(limiters):
                times[k] += _timed(
                    lambda i, lim=limiter, s=share: lim.acquire(
                        f"b{i}@news.example", max_wait=MAX_WAIT, share=s
                    ),
                    ORDER_BATCH,
                    batch,
                )
        for limiter in limiters:
            limiter.close()
        out.append((name, statistics.median(times[0]) * 1e6, statistics.median(times[1]) * 1e6))
    return out


def _order_rows(
    orders: list[tuple[str, float, float]],
    counts: tuple[int, int],
    what: str,
    front: tuple[str, float, float] | None = None,
) -> list[tuple[str, str, str, str, str]]:
    """The rows "<what> per decision, order" (µs), as ratios to the fewer bookings; then the
    worst order's ratio, the figure the target is about; with ``front`` (:data:`FRONT_ORDER`)
    its row too and the worst ratio of the same operation at both sizes (``front`` in place
    of the front order, whose mails are appended at the fewer bookings)."""
    rows = [
        (
            f"{what} per decision after {counts[1]:,} bookings, {name}",
            f"{large:.0f} µs",
            f"{small:.0f} µs at {counts[0]} / {large / small:.2f}",
            "<= 2",
            "yes" if large / small <= 2 else "no",
        )
        for name, small, large in [*orders, *([front] if front else [])]
    ]
    worst = max(large / small for _, small, large in orders)
    rows.append(
        (
            f"  {what}: worst order, ratio {counts[1]:,} / {counts[0]} bookings",
            f"{worst:.2f}",
            "-",
            "<= 2",
            "yes" if worst <= 2 else "no",
        )
    )
    if front:
        same = [(n, s, la) for n, s, la in orders if "inserted at the front" not in n]
        worst = max(large / small for _, small, large in [*same, front])
        rows.append(
            (
                f"  {what}: worst order, the same operation at both sizes",
                f"{worst:.2f}",
                "-",
                "<= 2",
                "yes" if worst <= 2 else "no",
            )
        )
    return rows


def bench_memory_backlog(counts: tuple[int, ...]) -> list[tuple[int, float]]:
    """Per backlog size: the median time of one ``memory://`` decision in the sender scope
    under ``sender: 14/1s gcra`` (a newsletter mail, share 0.5, booked at the end, once the
    room at the front is taken), the backlog booked by real decisions."""
    out = []
    policy = Policy.parse("recipient: 1/60s; sender: 14/1s gcra", name="recipient")
    for count in counts:
        clock = ManualClock(1_700_000_000.0)
        limiter = Limiter.from_url("memory://", policy, clock=clock, secret="bench")
        for i in range(count):
            limiter.acquire(f"n{i}@news.example", mail_id=f"n{i}", max_wait=MAX_WAIT, share=0.5)
        for i in range(8):
            limiter.acquire(f"w{i}@news.example", max_wait=MAX_WAIT, share=0.5)
        times = _timed(
            lambda i, lim=limiter: lim.acquire(
                f"b{i}@news.example", mail_id=f"b{i}", max_wait=MAX_WAIT, share=0.5
            ),
            200,
        )
        out.append((count, statistics.median(times)))
        limiter.close()
    return out


def bench_redis_memory(url: str) -> dict[str, float]:
    client = redis.Redis.from_url(url)
    client.flushall()
    clock = ManualClock(1_700_000_000.0)
    limiter = Limiter.from_url(url, POLICY, clock=clock, secret="bench")
    keys = [f"user{i}@example.com" for i in range(DISTINCT_KEYS)]
    before = client.info("memory")["used_memory"]
    for _ in range(10):  # ten admissions per key, an hour apart: a full reference log
        for start in range(0, DISTINCT_KEYS, 500):
            batch = keys[start : start + 500]
            ids = [str(uuid.uuid4()) for _ in batch]
            assert all(d.allowed for d in limiter.acquire_many(batch, mail_ids=ids))
        clock.advance(3_600)
    after = client.info("memory")["used_memory"]
    usage = client.memory_usage(limiter.storage_key("recipient", keys[0]))
    limiter.close()

    client.flushall()
    before_z = client.info("memory")["used_memory"]
    pipe = client.pipeline(transaction=False)
    for i in range(DISTINCT_KEYS):
        key = f"mailguard:{{{uuid.uuid4().hex[:16]}}}"
        pipe.zadd(key, {str(uuid.uuid4()): 1_700_000_000_000 + j * 3_600_000 for j in range(10)})
        pipe.pexpire(key, 86_400_000)
        if i % 500 == 499:
            pipe.execute()
    pipe.execute()
    after_z = client.info("memory")["used_memory"]
    zkey = client.randomkey()
    zusage = client.memory_usage(zkey)
    client.flushall()
    client.close()
    return {
        "usage": float(usage),
        "delta": (after - before) / DISTINCT_KEYS,
        "zset_usage": float(zusage),
        "zset_delta": (after_z - before_z) / DISTINCT_KEYS,
    }


def bench_memory_backend() -> tuple[float, float]:
    clock = ManualClock(1_700_000_000.0)
    limiter = Limiter.from_url("memory://", POLICY, clock=clock, secret="bench")
    keys = [f"user{i}@example.com" for i in range(DISTINCT_KEYS)]
    lock = threading.Lock()
    table = {k: 1 for k in keys}

    def floor(key: str) -> object:
        with lock:
            return table.get(key)

    rates: dict[str, list[float]] = {"memory": [], "floor": []}
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for key in keys:
            floor(key)
        rates["floor"].append(DISTINCT_KEYS / (time.perf_counter() - start))
        start = time.perf_counter()
        for key in keys:
            limiter.acquire(key)
        rates["memory"].append(DISTINCT_KEYS / (time.perf_counter() - start))
        clock.advance(61)  # the next pass mixes admissions and refusals across the tiers
    return statistics.median(rates["memory"]), statistics.median(rates["floor"])


def bench_acquire_many(url: str) -> tuple[float, float]:
    limiter = Limiter.from_url(url, POLICY, secret="bench", namespace="many")
    keys = [f"user{i}@example.com" for i in range(100)]
    singles, batches = [], []
    for _ in range(ROUNDS * 4):
        start = time.perf_counter()
        for key in keys:
            limiter.acquire(key)
        singles.append(time.perf_counter() - start)
        start = time.perf_counter()
        limiter.acquire_many(keys)
        batches.append(time.perf_counter() - start)
    limiter.close()
    return statistics.median(singles), statistics.median(batches)


def _machine() -> str:
    cpu = "unknown cpu"
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def _backlog_rows(
    backlog: list[tuple[str, int, float, int, float]],
) -> list[tuple[str, str, str, str, str]]:
    """The rows "decision after N bookings in the sender scope", as ratios to 10 bookings: the
    round trip's, then the server's time per script call."""
    rows = []
    first = min(count for _, count, *_ in backlog)
    floors = {tier: (s, us) for tier, count, s, _, us in backlog if count == first}
    for tier, count, seconds, size, server in backlog:
        ratio, server_ratio = seconds / floors[tier][0], server / floors[tier][1]
        rows.append(
            (
                f"decision after {count:,} bookings in the sender scope, sender: {tier} (bytes)",
                f"{seconds * 1e3:.2f} ms ({size:,} B)",
                f"{floors[tier][0] * 1e3:.2f} ms at {first} / {ratio:.2f}",
                "<= 2",
                "yes" if ratio <= 2 else "no",
            )
        )
        rows.append(
            (
                f"  same, server time per EVALSHA (INFO commandstats), sender: {tier}",
                f"{server:.0f} µs",
                f"{floors[tier][1]:.0f} µs at {first} / {server_ratio:.2f}",
                "<= 2",
                "yes" if server_ratio <= 2 else "no",
            )
        )
    return rows


def _decision_rows(
    decisions: list[tuple[str, float, float, float]],
) -> list[tuple[str, str, str, str, str]]:
    """The Redis decision rows: hot and distinct against the no-op floor (>= 0.85); scoped
    against its lower bound measured in the same rounds (>= 0.80), its no-op ratio shown for
    information; the lower bound against the no-op floor, for information (no target)."""
    rates = {name: rate for name, rate, _, _ in decisions}
    floor_rate = rates["floor"]
    rows = []
    for name, rate, p50, p99 in decisions[1:]:
        value = f"{rate:,.0f} ({p50:.0f}, {p99:.0f})"
        ratio = rate / floor_rate
        if name == "scoped":
            to_bare = rate / rates["bare"]
            rows.append(
                (
                    "redis scoped: recipient + sender gcra + tenant fixed: decisions/s "
                    "(p50, p99 us)",
                    value,
                    f"{rates['bare']:,.0f} lower bound / {to_bare:.2f} (no-op {ratio:.2f})",
                    ">= 0.80",
                    "yes" if to_bare >= 0.80 else "no",
                )
            )
            continue
        if name == "bare":
            rows.append(
                (
                    "scoped lower bound: its reads and writes, no decision: decisions/s "
                    "(p50, p99 us)",
                    value,
                    f"{floor_rate:,.0f} no-op EVALSHA / {ratio:.2f}",
                    "-",
                    "info",
                )
            )
            continue
        label = {"hot": "redis hot key", "distinct": "redis distinct keys"}[name]
        rows.append(
            (
                f"{label}: decisions/s (p50, p99 us)",
                value,
                f"{floor_rate:,.0f} no-op EVALSHA / {ratio:.2f}",
                ">= 0.85",
                "yes" if ratio >= 0.85 else "no",
            )
        )
    return rows


def _memory_backlog_rows(backlog: list[tuple[int, float]]) -> list[tuple[str, str, str, str, str]]:
    """The rows "memory decision after N bookings in the sender scope", as ratios to 10."""
    floor = backlog[0][1]
    return [
        (
            f"memory decision after {count:,} bookings in the sender scope, sender: 14/1s gcra",
            f"{seconds * 1e3:.3f} ms",
            f"{floor * 1e3:.3f} ms at {backlog[0][0]} / {seconds / floor:.2f}",
            "<= 2",
            "yes" if seconds / floor <= 2 else "no",
        )
        for count, seconds in backlog
    ]


def _print(rows: list[tuple[str, str, str, str, str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for n, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def main_backlog() -> None:
    """``python -m benchmarks.limiter --backlog``: only the gcra backlog rows, at 10 and
    100 000 bookings (Redis and memory, every order of :data:`ORDERS`), a few minutes."""
    counts = (BACKLOGS[0], BACKLOGS[-1])
    server = RedisServer().start()
    try:
        version = redis.Redis.from_url(server.url).info("server")["redis_version"]
        print(f"machine: {_machine()}, redis-server {version} on loopback")
        backlog = bench_backlog(server.url, counts, tiers=("14/1s gcra",))
        orders = bench_orders(server.url, counts)
        front = bench_front_inserts(server.url, counts)
    finally:
        server.cleanup()
    rows = [("measure", "value", "floor / ratio", "target", "met")]
    rows += _backlog_rows(backlog) + _order_rows(orders, counts, "redis server time", front)
    rows += _memory_backlog_rows(bench_memory_backlog(counts))
    memory = bench_memory_orders(counts)
    _print(rows + _order_rows(memory, counts, "memory time", bench_memory_front_inserts(counts)))


def main() -> None:
    if "--backlog" in sys.argv[1:]:
        main_backlog()
        return
    server = RedisServer().start()
    try:
        version = redis.Redis.from_url(server.url).info("server")["redis_version"]
        print(f"machine: {_machine()}, redis-server {version} on loopback")
        decisions = bench_redis_decisions(server.url)
        memory = bench_redis_memory(server.url)
        single, batch = bench_acquire_many(server.url)
        backlog = bench_backlog(server.url, BACKLOGS)
        orders = bench_orders(server.url, (BACKLOGS[0], BACKLOGS[-1]))
    finally:
        server.cleanup()
    mem_rate, mem_floor = bench_memory_backend()
    mem_backlog = bench_memory_backlog(BACKLOGS)
    mem_orders = bench_memory_orders((BACKLOGS[0], BACKLOGS[-1]))

    rows = [("measure", "value", "floor / ratio", "target", "met")]
    rows += _decision_rows(decisions)
    rows.append(
        (
            "redis bytes/key, full reference log: MEMORY USAGE",
            f"{memory['usage']:.0f}",
            f"sorted set {memory['zset_usage']:.0f} / {memory['usage'] / memory['zset_usage']:.2f}",
            "<= 200",
            "yes" if memory["usage"] <= 200 else "no",
        )
    )
    rows.append(
        (
            "redis bytes/key, used_memory delta over 10 000 keys",
            f"{memory['delta']:.0f}",
            f"sorted set {memory['zset_delta']:.0f} / {memory['delta'] / memory['zset_delta']:.2f}",
            "<= 200",
            "yes" if memory["delta"] <= 200 else "no",
        )
    )
    rows.append(
        (
            "memory backend decisions/s, 1 thread, 10 000 keys",
            f"{mem_rate:,.0f}",
            f"{mem_floor:,.0f} locked dict get / {mem_rate / mem_floor:.2f}",
            ">= 200,000",
            "yes" if mem_rate >= 200_000 else "no",
        )
    )
    rows.append(
        (
            "acquire_many(100) vs 100 acquire calls (ms)",
            f"{batch * 1e3:.2f}",
            f"{single * 1e3:.2f} / {single / batch:.1f}x",
            ">= 5x",
            "yes" if single / batch >= 5 else "no",
        )
    )
    rows += _backlog_rows(backlog)
    rows += _order_rows(orders, (BACKLOGS[0], BACKLOGS[-1]), "redis server time")
    rows += _memory_backlog_rows(mem_backlog)
    rows += _order_rows(mem_orders, (BACKLOGS[0], BACKLOGS[-1]), "memory time")
    _print(rows)


if __name__ == "__main__":
    main()
