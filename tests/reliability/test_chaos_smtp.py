"""The chaos suite's SMTP faults (:mod:`tests.reliability.test_chaos`: its stack, load and
audit): 451s at RCPT and DATA, dropped connections, one mail accepted then dropped before its
250, a 550; every mail once but the accepted-then-dropped one, counted, with the same
Message-ID. In a file of its own beside the other faults: the suite's processes (``pytest -n``,
one file each) run the two files side by side.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from tests.reliability.test_chaos import Stack, audit, check, load, settle, stacks
from tests.waiting import poll

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def stack_factory() -> Iterator[Callable[..., Stack]]:
    yield from stacks()


def test_smtp_faults(stack_factory: Callable[..., Stack]) -> None:
    """451s, a 550, dropped connections and one accepted-then-dropped: one counted duplicate."""
    stack = stack_factory()
    stack.smtp.fail_data("451 4.3.0 try later", times=3)
    stack.smtp.fail_rcpt("451 4.3.0 try later", times=2)
    stack.smtp.drop_connection(times=2)
    results = load(stack, "smtp")
    time.sleep(1.5)
    stack.smtp.accept_then_drop(times=1)
    # The 550 only once the accepted-then-dropped mail has been sent again: armed earlier, it
    # could answer that very retry (a legitimate outcome, but then no duplicate to count).
    poll(
        lambda: (
            max(Counter(d.message["Message-ID"] for d in stack.smtp.delivered).values(), default=0)
            == 2
        ),
        60,
        "the accepted-then-dropped mail sent again",
    )
    stack.smtp.fail_data("550 5.1.1 user unknown", times=1)
    result = audit(stack, settle(results, 90))
    check(result, "smtp faults", duplicates=1, failed=1)
    copies = Counter(d.message["Message-ID"] for d in stack.smtp.delivered)
    assert max(copies.values()) == 2, "the duplicate carries the same Message-ID"
