"""Bytes per waiting mail at scale: copies of real waiting mails' entries, many of them.

A program's part, not a test (:mod:`benchmarks.table`'s bytes rows). What a thousand parked
mails grow Redis by, divided by a thousand, carries costs that do not grow with the mails (the
schedule's keys themselves, a script cache) and whichever of Redis's tables happened to double
during those thousand; what a deployment plans for is what one more waiting mail costs when
many wait. So:

1. :func:`sample` reads back every entry the real waiting mails wrote (:mod:`benchmarks.schedule`
   runs a real worker that parks them): per-mail keys (the Celery result record: value and TTL)
   and the members the mails added to shared keys (the schedule's sorted sets, sets and
   hashes), by each mail's own name (:mod:`mailer.records.schedule.ids`). Anything else that
   grew, and that a copy would therefore leave out, stops the program with its name;
2. :func:`per_mail` writes copies of those entries (each under a new mail id, the samples in
   turn) into a fresh redis-server and divides what ``MEMORY STATS``' dataset and key tables
   grew by from the empty server by the copies, at eight counts from 32 768 to 65 536. Redis's
   tables (a database's keys and expiry times, a big sorted set's or hash's members) double
   when full: a table holds 8 bytes per slot for 1 to 2 slots per entry, by how full it is, so
   the figure moves by up to 8 bytes per table within that span, and the mean over it is what
   a waiting mail costs whatever the count. The figures are read once every table has
   finished moving to its doubled size (both sizes are allocated while it moves).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import redis

from devservers.redis_servers import RedisServer
from mailer.records.schedule.ids import stored

#: The fewest copies measured (the most: twice as many), and at how many counts in between.
LOW, STEPS = 2**15, 8
#: Commands per pipeline while copying.
BATCH = 2_000


@dataclass
class Sample:
    """What each waiting mail wrote, ready to copy."""

    #: Per-mail string keys: (database, name with the mail id as ``{id}``, value, TTL ms; -1:
    #: none), one list per mail.
    keys: list[list[tuple[int, str, bytes, int]]] = field(default_factory=list)
    #: Members added to shared keys: (database, key, type, value: the score or the hash value;
    #: None for a set), one list per mail, in the same order as :attr:`keys`.
    members: list[list[tuple[int, bytes, str, bytes | float | None]]] = field(default_factory=list)


def _clients(url: str, dbs: tuple[int, ...]) -> dict[int, redis.Redis]:
    base = url.rsplit("/", 1)[0]
    return {db: redis.Redis.from_url(f"{base}/{db}") for db in dbs}


def names(url: str, dbs: tuple[int, ...]) -> dict[int, set[bytes]]:
    """Every key name of ``dbs`` on the server at ``url`` (before the mails, for :func:`sample`)."""
    found: dict[int, set[bytes]] = {}
    for db, client in _clients(url, dbs).items():
        try:
            found[db] = set(client.scan_iter(count=1000))
        finally:
            client.close()
    return found


def sample(url: str, before: dict[int, set[bytes]], ids: list[str]) -> Sample:
    """Read back what the waiting mails ``ids`` wrote to the server at ``url`` since
    ``before`` (:func:`names`). Raises SystemExit naming a new key that is no mail's own and
    holds no mail's member, or a grown key of a type a copy cannot make."""
    out = Sample()
    clients = _clients(url, tuple(before))
    try:
        new = {db: set(c.scan_iter(count=1000)) - before[db] for db, c in clients.items()}
        own = {
            db: {key for key in keys if any(i.encode() in key for i in ids)}
            for db, keys in new.items()
        }
        shared = {
            db: [(key, clients[db].type(key).decode()) for key in before[db] | (new[db] - own[db])]
            for db in clients
        }
        covered: set[tuple[int, bytes]] = set()
        for mail_id in ids:
            mine: list[tuple[int, str, bytes, int]] = []
            for db, keys in own.items():
                for key in (k for k in keys if mail_id.encode() in k):
                    if clients[db].type(key) != b"string":
                        raise SystemExit(f"waiting bytes: {key!r} is not a string; cannot copy it")
                    value = clients[db].get(key) or b""
                    template = key.decode().replace(mail_id, "{id}")
                    mine.append((db, template, value, int(clients[db].pttl(key))))
            members: list[tuple[int, bytes, str, bytes | float | None]] = []
            for db, keys in shared.items():
                members += _members_of(clients[db], db, keys, stored(mail_id), covered)
            out.keys.append(mine)
            out.members.append(members)
        for db, keys in new.items():
            for key in keys - own[db]:
                if (db, key) not in covered:
                    raise SystemExit(f"waiting bytes: db{db} {key!r} grew and is no mail's own")
    finally:
        for client in clients.values():
            client.close()
    return out


def _members_of(
    client: redis.Redis,
    db: int,
    keys: list[tuple[bytes, str]],
    name: bytes,
    covered: set[tuple[int, bytes]],
) -> list[tuple[int, bytes, str, bytes | float | None]]:
    """The members named ``name`` in the shared ``keys`` (name, type) of ``client``'s database."""
    found: list[tuple[int, bytes, str, bytes | float | None]] = []
    for key, kind in keys:
        value: bytes | float | None
        if kind == "zset":
            value = client.zscore(key, name)
            present = value is not None
        elif kind == "hash":
            value = client.hget(key, name)
            present = value is not None
        elif kind == "set":
            value, present = None, bool(client.sismember(key, name))
        else:
            continue
        if present:
            found.append((db, key, kind, value))
            covered.add((db, key))
    return found


def _copy(clients: dict[int, redis.Redis], taken: Sample, start: int, count: int) -> None:
    """Write copies ``start`` to ``start + count`` of the sampled mails, each under a new id."""
    pipes = {db: client.pipeline(transaction=False) for db, client in clients.items()}
    queued = 0
    for n in range(start, start + count):
        mail_id = str(uuid.UUID(int=n + 1, version=4))
        name = stored(mail_id)
        which = n % len(taken.keys)
        for db, template, value, ttl in taken.keys[which]:
            key = template.replace("{id}", mail_id)
            pipes[db].set(key, value, px=ttl if ttl > 0 else None)
        for db, key, kind, member in taken.members[which]:
            if kind == "zset":
                pipes[db].zadd(key, {name: float(member or 0)})
            elif kind == "hash":
                pipes[db].hset(key, name, member or b"")
            else:
                pipes[db].sadd(key, name)
        queued += 1
        if queued >= BATCH:
            for pipe in pipes.values():
                pipe.execute()
            queued = 0
    for pipe in pipes.values():
        pipe.execute()


def _settled(admin: redis.Redis, clients: dict[int, redis.Redis], taken: Sample, count: int) -> int:
    """:func:`_kept` once every table Redis is moving to a doubled size has finished the move
    (while it moves, both sizes are allocated): a sorted set's or a hash's own table moves one
    step at each look-up, so ``count`` look-ups of an absent member of each shared key finish
    it; the databases' tables move in Redis's cron, so the figure is read until two reads
    0.2 s apart agree (5 s at most)."""
    shared = {(db, key, kind) for mail in taken.members for db, key, kind, _ in mail}
    for db, key, kind in shared:
        pipe = clients[db].pipeline(transaction=False)
        for n in range(count):
            name = b"absent:%d" % n
            if kind == "zset":
                pipe.zscore(key, name)
            elif kind == "hash":
                pipe.hexists(key, name)
            else:
                pipe.sismember(key, name)
            if len(pipe) >= BATCH:
                pipe.execute()
        pipe.execute()
    last = _kept(admin)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = _kept(admin)
        if now == last:
            break
        last = now
    return last


def _kept(client: redis.Redis) -> int:
    """``MEMORY STATS``' dataset and every database's key and expires tables, bytes."""
    stats = client.memory_stats()
    dbs = [v for k, v in stats.items() if k.startswith("db.") and isinstance(v, dict)]
    tables = sum(
        int(db["overhead.hashtable.main"]) + int(db["overhead.hashtable.expires"]) for db in dbs
    )
    return int(stats["dataset.bytes"]) + tables


@dataclass
class AtScale:
    """Bytes per waiting mail, all in, with ``low`` to ``high`` mails waiting."""

    low: int
    high: int
    #: Over the fills measured: the mean, the least and the most bytes per mail.
    mean: float
    least: float
    most: float


def per_mail(taken: Sample, low: int = LOW, steps: int = STEPS) -> AtScale:
    """Bytes per waiting mail, all in, with ``low`` to ``2 * low`` copies of the sampled mails
    in a fresh redis-server: what ``MEMORY STATS``' dataset and key tables grew by from the
    empty server, divided by the copies, at ``steps`` counts spaced evenly by ratio over that
    span (module docstring)."""
    if not taken.keys:
        raise SystemExit("waiting bytes: no waiting mail was sampled")
    dbs = tuple(
        sorted(
            {db for mail in taken.keys for db, *_ in mail}
            | {db for mail in taken.members for db, *_ in mail}
        )
    )
    server = RedisServer().start()
    clients = _clients(server.url, dbs or (0,))
    admin = next(iter(clients.values()))
    try:
        empty = _kept(admin)
        done, found = 0, []
        for step in range(steps):
            count = round(low * 2 ** (step / steps))
            _copy(clients, taken, done, count - done)
            done = count
            found.append((_settled(admin, clients, taken, done) - empty) / done)
        return AtScale(low, 2 * low, sum(found) / len(found), min(found), max(found))
    finally:
        for client in clients.values():
            client.close()
        server.cleanup()
