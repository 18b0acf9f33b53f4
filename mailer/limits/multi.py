"""One slot for several keys: a message to several recipients goes when all of them have room.

:func:`acquire_all` books one mail (one ``mail_id``) in the logs of several keys at one slot, the
earliest time every key admits, on any limiter that takes ``not_before`` (:class:`~mailer.limits.
limiter.Limiter` with any policy, memory or Redis, Cluster included; a caller that counts the
mail in a tenant or under a kind's share binds them in the limiter it passes):

1. Keys are asked in the order given, each with ``not_before = t``, the latest slot answered so
   far (a mail's own earlier booking is answered again: re-runs are idempotent).
2. A key that answers a later slot makes the round give back what it holds (that key included)
   and start again at that slot; a key that refuses makes it give back everything and refuse.
   ``t`` only grows, so rounds end; after :data:`MAX_ROUNDS` the call raises
   :class:`~mailer.errors.Contended`, holding nothing (the guard defers the mail with backoff,
   never sends it unguarded).

Never over, for the reason :mod:`mailer.limits.stores.scoped_cluster` gives: each key only ever
holds what its own tiers admitted, and giving back only frees room. Not atomic across keys: a
round about to be rolled back can make a concurrent mail to one of the keys wait longer than
it had to (never less). Each key's budget counts the message once. Costs one decision per key
per round (usually one round).

>>> from mailer import Limiter, ManualClock, Policy
>>> limiter = Limiter.from_url("memory://", Policy.parse("1/60s"), clock=ManualClock(1000.0))
>>> _ = limiter.acquire("bob@example.com")
>>> d = acquire_all(limiter, ["ada@example.com", "bob@example.com"], mail_id="m1", max_wait=90)
>>> d.booked, d.wait
(True, 60.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from mailer.errors import Contended
from mailer.limits.decision import Decision

#: How many rounds a decision may take before it is given up as contended.
MAX_ROUNDS = 16


class TakesNotBefore(Protocol):
    """What :func:`acquire_all` needs of a limiter."""

    def acquire(
        self,
        key: str,
        *,
        mail_id: str | None = None,
        max_wait: float = 0.0,
        not_before: float | None = None,
    ) -> Decision: ...

    def release(self, key: str, mail_id: str) -> bool: ...


def acquire_all(
    limiter: TakesNotBefore,
    keys: Sequence[str],
    *,
    mail_id: str,
    max_wait: float = 0.0,
    not_before: float | None = None,
) -> Decision:
    """Admit or book ``mail_id`` in every key at one slot, or refuse leaving nothing held.

    ``keys`` must be distinct (deduplicate limit keys first). The answer is allowed when every
    key admits the mail now, booked at the common slot otherwise, or the refusing key's
    refusal (its ``tier`` and ``wait``); ``remaining`` is that of the last key asked.
    """
    if not keys:
        raise ValueError("acquire_all needs at least one key")
    if len(set(keys)) != len(keys):
        raise ValueError("acquire_all needs distinct keys")
    t_ms = None if not_before is None else math.ceil(not_before * 1000 - 1e-6)
    raiser: Decision | None = None  # the answer that last moved the slot: its tier binds
    for _ in range(MAX_ROUNDS):
        held: list[str] = []
        answers: list[Decision] = []
        moved = False
        for key in keys:
            nb = None if t_ms is None else t_ms / 1000
            decision = limiter.acquire(key, mail_id=mail_id, max_wait=max_wait, not_before=nb)
            if decision.refused:
                _give_back(limiter, held, mail_id)
                return decision
            # Another slot here: all move to the later one. An admission now is fine whatever
            # the others hold (theirs are at most now: not_before was at most now for it).
            if held and decision.at_ms != t_ms and not decision.allowed:
                _give_back(limiter, [*held, key], mail_id)
                if decision.at_ms > (t_ms or 0):
                    t_ms, raiser = decision.at_ms, decision
                moved = True
                break
            held.append(key)
            answers.append(decision)
            if decision.tier is not None:
                raiser = decision
            t_ms = decision.at_ms
        if not moved:
            return _combined(answers, raiser)
    raise Contended(
        f"{len(keys)} recipients found no common slot in {MAX_ROUNDS} rounds; nothing is held"
    )


def release_all(limiter: TakesNotBefore, keys: Sequence[str], mail_id: str) -> bool:
    """Give ``mail_id``'s slot back in every key; whether any key held one."""
    return any([limiter.release(key, mail_id) for key in keys])  # every key, no short circuit


def _give_back(limiter: TakesNotBefore, keys: list[str], mail_id: str) -> None:
    for key in reversed(keys):
        limiter.release(key, mail_id)


def _combined(answers: list[Decision], raiser: Decision | None) -> Decision:
    """One decision for the message: allowed if every key admitted it now, else booked at the
    latest slot (every key holds that one), its binding tier that of the answer that moved
    the slot there last."""
    if all(d.allowed for d in answers):
        return answers[-1]
    latest = max(answers, key=lambda d: d.at_ms)
    if raiser is not None and raiser.at_ms == latest.at_ms and raiser.tier is not None:
        return latest._replace(allowed=False, booked=True, tier=raiser.tier, scope=raiser.scope)
    return latest._replace(allowed=False, booked=True)
