"""The README walk through the guard: a recipient's mails go in the order they were sent.

README step 4 under ``1/20s, 3/1h``: mail 1 sent, then mails 2, 3, 4 sent in turn (their
``_order`` stamps rising, :mod:`workers.run.stamps`), whose first runs reach the guard in any order
(four pool processes). Each run follows its countdowns on an injected clock: mail 2 leaves at
+20 s, mail 3 at +40 s, mail 4 at +1 h, in their sending order, memory limiter and Redis alike;
a mail moved back by an earlier one books again at its old slot and never leaves early.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import replace

import pytest

from mailer import Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import Finish, GuardConfig, Later, MailRequest
from mailer.guard.engine import Guard
from mailer.mail.transports import MemoryTransport
from mailer.records.ledger import MemoryLedger
from mailer.steps import Progress

ADA = "ada@example.com"
T0 = 1_700_000_000.0


def _guard(backend_url: str, clock: ManualClock, namespace: str) -> Guard:
    policy = Policy.parse("1/20s, 3/1h", name="recipient")
    secret = None if backend_url == "memory://" else "s"
    limiter = Limiter.from_url(backend_url, policy, clock=clock, secret=secret, namespace=namespace)
    assert limiter.keeps_order
    return memory_guard(
        limiter, MemoryLedger(clock), MemoryTransport(), kinds=Kinds.defaults(),
        config=GuardConfig(late_tolerance=1.0), clock=clock,
    )  # fmt: skip


def _mail(n: int) -> MailRequest:
    return MailRequest(to=ADA, mail_id=f"readme-{n}", subject=f"Mail {n}", body="Hello")


def _order(n: int) -> int:
    return int(T0 * 1e6) + 1000 * n  # sent 1 ms apart, in turn


@pytest.mark.parametrize("runs", list(itertools.permutations((2, 3, 4))))
def test_readme_step_4_books_20s_40s_1h_in_sending_order(
    backend_url: str, clock: ManualClock, runs: tuple[int, int, int]
) -> None:
    """Mails 2, 3, 4 whose first runs come in ``runs`` order: sent at +20 s, +40 s and +1 h,
    in that order; mail 2's outcome names 1/20s and a 20 s wait, whenever its run came (as
    the README shows)."""
    guard = _guard(backend_url, clock, namespace="readme-" + "".join(map(str, runs)))
    assert isinstance(guard.process(_mail(1), Progress(order=_order(1))), Finish)
    queue: list[tuple[float, int, int, Progress]] = []
    tick = itertools.count()
    first: dict[int, Later] = {}
    for n in runs:
        step = guard.process(_mail(n), Progress(order=_order(n)))
        assert isinstance(step, Later), step
        first[n] = step
        heapq.heappush(queue, (clock.now + step.wait, next(tick), n, step.progress))
    mail_2 = first[2].outcome
    assert (mail_2.tier, mail_2.wait, mail_2.due) == ("1/20s", 20.0, T0 + 20), "as the README"
    sent: list[tuple[int, float]] = []
    while queue:
        at, _, n, progress = heapq.heappop(queue)
        clock.set(at)
        step = guard.process(_mail(n), replace(progress, order=_order(n)))
        if isinstance(step, Later):
            assert step.outcome.due is not None and step.outcome.due > at, "never early"
            heapq.heappush(queue, (clock.now + step.wait, next(tick), n, step.progress))
            continue
        assert isinstance(step, Finish) and step.outcome.status == "sent", step
        sent.append((n, step.outcome.admitted_at or 0.0))
    assert sent == [(2, T0 + 20), (3, T0 + 40), (4, T0 + 3600)]
