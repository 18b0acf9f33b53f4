"""The order stamp ``send_mail.delay`` puts on a caller's call (``_order``): made once, checked.

A caller's call gets ``_order`` (epoch microseconds, strictly increasing in the producer's
process: :mod:`workers.run.stamps`); a run published again (``_progress``) keeps the one it carries
and gets none; a forged value that is not a whole number of microseconds is refused at enqueue
as a private keyword, in one line; a run's progress takes the stamp, never carries it.
"""

from __future__ import annotations

import itertools
import time

import pytest

from mailer.mail.arguments import InvalidArguments
from mailer.steps import Progress
from workers.run.call import check_call
from workers.run.stamps import arrived, order_stamp, stamped


def test_stamps_rise_strictly_even_within_one_microsecond() -> None:
    before = time.time_ns() // 1000
    stamps = [order_stamp() for _ in range(1000)]
    assert all(b > a for a, b in itertools.pairwise(stamps))
    assert stamps[0] >= before, "epoch microseconds, never behind the clock"


def test_a_callers_call_is_stamped_once_a_run_published_again_never() -> None:
    call = {"subject": "s"}
    kwargs = stamped(call, {"subject": "s"})
    assert isinstance(kwargs["_order"], int) and kwargs["_requested_at"] > 0
    kept = stamped({"_order": 7}, {"_order": 7})
    assert kept["_order"] == 7, "a stamp given is kept"
    again = stamped({"_progress": "x", "_requested_at": 1.0}, {"_progress": "x"})
    assert "_order" not in again, "a run published again is not stamped anew"


def test_a_forged_stamp_is_refused_at_enqueue() -> None:
    for bad in ("1", 1.5, True, -1, 0, 10**17):
        with pytest.raises(InvalidArguments, match="_order is private"):
            check_call(["ada@example.com"], {"_order": bad})
    assert check_call(["ada@example.com"], {"_order": order_stamp()})["_order"] > 0


def test_a_run_takes_the_stamp_into_its_progress_and_never_carries_it() -> None:
    progress = arrived(Progress(), 1_700_000_000.0, 1_700_000_000_000_001)
    assert progress.order == 1_700_000_000_000_001
    assert "order" not in progress.as_dict()
    assert arrived(Progress(), None, None).order == 0
