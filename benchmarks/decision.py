"""Decision benchmark: one Redis decision against its two floors, measured in the same rounds.

A program, not a test (``make bench`` runs it through :mod:`benchmarks.table`). Contenders run
interleaved round by round on one connection to one loopback redis-server, ``CALLS`` calls per
contender per round, ``ROUNDS`` rounds:

- **no-op**: ``EVALSHA`` of ``return 0`` with one key: the round trip of any script call;
- **mailguard**: ``Limiter.acquire`` under the reference policy (``1/60s, 5/1h, 10/24h``), on one
  hot key (refused after its first mail) and on distinct keys (each admitted);
- **seed**: the seed's design, the project's first multi-tier sliding-window script
  (``benchmarks/seed_sliding_log.lua``, the same policy compiled in), called with the same
  keyed-hash key, sent the same way (``execute_command``) and turned into the same
  :class:`~mailer.Decision` (from its array reply): what the decision cost before
  reservations, releases and late runs;
- **bound**: the lower bound of any exact decision on the server's clock, the same client path as
  mailguard's (keyed hash, ``EVALSHA``, the packed reply turned into a
  :class:`~mailer.Decision`) around a script that makes only the calls such a decision cannot
  do without and decides nothing: ``TIME``, ``GET`` of the log and, for an admission (the
  distinct keys), ``SET ... PX`` of a one-entry log; its reply a fixed packed string of the same
  size. What is left between mailguard and this bound is the decision itself.

Two figures per contender: calls per second as the client sees them (round trip included: the
ratio a user feels), and the server's time per call from ``INFO commandstats`` (reset before
each contender's block: less noisy on a shared machine, as other processes delay the client
far more than the server's script run). Rates and server times are medians over the rounds;
a ratio of rates is the median over the rounds of the ratio in each round.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from mailer import Limiter, Policy
from mailer.limits.decision import new_decision
from mailer.limits.keys import KeyHasher
from mailer.limits.policy import REFERENCE_POLICY
from mailer.limits.stores.redis import reply_format

ROUNDS = 15
CALLS = 1_000
POLICY = Policy.parse(REFERENCE_POLICY, name="recipient")
SEED_TEMPLATE = (Path(__file__).parent / "seed_sliding_log.lua").read_text()


@dataclass
class Figures:
    """One contender's medians over the rounds, and its rate in each round."""

    rate: float  # calls per second, client side
    server_us: float  # the server's µs per script call (INFO commandstats)
    rounds: list[float]  # calls per second in each round, in order

    def ratio(self, floor: Figures) -> float:
        """The median over the rounds of this rate over ``floor``'s in the same round (a
        round's contenders run within a second of each other: slow drifts in the machine's
        load cancel out)."""
        return statistics.median(a / b for a, b in zip(self.rounds, floor.rounds, strict=True))


#: The bound's script: ARGV[1] "1" writes (an admission), else it only reads; a fixed reply.
BOUND_SCRIPT = """
local t = redis.call('TIME')
local raw = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  redis.call('SET', KEYS[1], struct.pack('>I6I4I6', t[1] * 1000, 0, 0), 'PX', 86400000)
end
return struct.pack(REPLY, 1, 0, t[1] * 1000, 0, 0, 0, 4, 9)
"""


def seed_script() -> str:
    """The seed's script with the reference policy compiled in, as the seed compiled it."""
    limits = ", ".join(str(t.limit) for t in POLICY.tiers)
    windows = ", ".join(str(t.window_ms) for t in POLICY.tiers)
    return SEED_TEMPLATE.replace("--[[LIMITS]]", limits).replace("--[[WINDOWS]]", windows)


def _block(client: redis.Redis, call: Callable[[int], object], offset: int) -> tuple[float, float]:
    """``CALLS`` calls of ``call``: (calls per second, server µs per script call)."""
    client.config_resetstat()
    clock = time.perf_counter
    start = clock()
    for i in range(offset, offset + CALLS):
        call(i)
    seconds = clock() - start
    stats = client.info("commandstats")
    script = stats.get("cmdstat_evalsha") or stats.get("cmdstat_fcall") or {}
    return CALLS / seconds, float(script.get("usec_per_call", 0.0))


def contenders(
    client: redis.Redis, url: str
) -> tuple[dict[str, Callable[[int], object]], list[Limiter]]:
    """The calls to time, by name, and the limiters to close afterwards."""
    noop = client.script_load("return 0")
    seed = client.script_load(seed_script())
    hasher = KeyHasher("bench", "seed", POLICY.name)
    tiers = POLICY.tiers
    hot = Limiter.from_url(url, POLICY, secret="bench", namespace="hot")
    distinct = Limiter.from_url(url, POLICY, secret="bench", namespace="distinct")
    bound_sha = client.script_load(
        BOUND_SCRIPT.replace("REPLY", repr(">BBI8I8B" + "I4" * len(tiers)))
    )
    unpack = reply_format(len(tiers)).unpack
    hot_key = "hot@example.com"
    keys = [f"user{i}@example.com" for i in range(CALLS * ROUNDS)]
    hot.acquire(hot_key)  # from now on the hot key is refused (1 per minute)
    seed_hot = hasher.storage_key(hot_key)
    client.evalsha(seed, 1, seed_hot, "a", "", 0, 0)

    def seed_call(recipient: str) -> object:  # mailguard's client path, the seed's reply
        key = hasher.storage_key(recipient)
        raw = client.execute_command("EVALSHA", seed, 1, key, "a", "", 0, 0)
        index = raw[4]
        tier, scope = (tiers[index - 1], "recipient") if index else (None, None)
        return new_decision((raw[0] == 1, raw[1] == 1, raw[2], raw[3], tier, tuple(raw[5:]), scope))

    bounding = KeyHasher("bench", "bound", POLICY.name)  # its own keys: an admission creates one

    def bound_call(recipient: str, write: str) -> object:  # mailguard's client path
        key = bounding.storage_key(recipient)
        fields = unpack(client.execute_command("EVALSHA", bound_sha, 1, key, write))
        tier, scope = (tiers[fields[4] - 1], "recipient") if fields[4] else (None, None)
        return new_decision(
            (fields[0] == 1, fields[1] == 1, fields[2], fields[3], tier, fields[5:], scope)
        )

    calls: dict[str, Callable[[int], object]] = {
        "no-op": lambda i: client.execute_command("EVALSHA", noop, 1, hot_key),
        "mailguard hot": lambda i: hot.acquire(hot_key),
        "seed hot": lambda i: seed_call(hot_key),
        "mailguard distinct": lambda i: distinct.acquire(keys[i]),
        "seed distinct": lambda i: seed_call(keys[i]),
        "bound hot": lambda i: bound_call(hot_key, "0"),
        "bound distinct": lambda i: bound_call(keys[i], "1"),
    }
    return calls, [hot, distinct]


def measure(url: str) -> dict[str, Figures]:
    """Every contender's figures, interleaved round by round (the order rotates each round)."""
    client = redis.Redis.from_url(url)
    calls, limiters = contenders(client, url)
    names = list(calls)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for name in names:  # warm-up: scripts cached, connections open
        _block(client, calls[name], CALLS * (ROUNDS - 1))
    client.flushall()
    calls, more = contenders(client, url)
    limiters += more
    for r in range(ROUNDS):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            samples[name].append(_block(client, calls[name], r * CALLS))
    for limiter in limiters:
        limiter.close()
    client.close()
    return {
        name: Figures(
            statistics.median(rate for rate, _ in s),
            statistics.median(us for _, us in s),
            [rate for rate, _ in s],
        )
        for name, s in samples.items()
    }


if __name__ == "__main__":
    from benchmarks.limiter import _machine
    from devservers.redis_servers import RedisServer

    server = RedisServer().start()
    try:
        print(_machine())
        for name, f in measure(server.url).items():
            print(f"{name:20} {f.rate:10,.0f}/s {f.server_us:6.2f} us")
    finally:
        server.cleanup()
