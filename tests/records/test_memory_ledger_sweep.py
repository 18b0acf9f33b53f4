"""The memory ledger forgets expired outcomes in sweeps whose cost is shared by the records."""

from __future__ import annotations

import pytest

from mailer.outcomes import Outcome
from mailer.records.ledger import memory
from mailer.records.ledger.base import SENT_TTL
from mailer.records.ledger.memory import MemoryLedger


def _sent(i: int) -> Outcome:
    return Outcome(status="sent", mail_id=f"m{i}", kind="default")


def test_sweeps_come_when_the_outcomes_kept_doubled(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1_000.0]
    ledger = MemoryLedger(clock=lambda: now[0])
    sweeps: list[int] = []
    sweep = ledger._sweep
    monkeypatch.setattr(ledger, "_sweep", lambda t: (sweeps.append(len(ledger._done)), sweep(t)))
    monkeypatch.setattr(memory, "SWEEP_FROM", 16)
    ledger._sweep_at = 16
    for i in range(1_000):
        ledger.record(_sent(i))
    assert sweeps == [16, 32, 64, 128, 256, 512]  # not one per record once past the first
    now[0] += SENT_TTL + 1
    ledger.record(_sent(1_000))  # expired now; the sweep at 1 024 kept forgets them all
    for i in range(1_001, 1_030):
        ledger.record(_sent(i))
    assert len(ledger._done) == 30
    assert ledger.recorded("m5") is None and ledger.recorded("m1029") is not None
