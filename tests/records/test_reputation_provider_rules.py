"""The reputation's defaults as the mailbox providers state them: a pause at a 0.3 % complaint
rate when no complaint rate is given (Gmail's and Yahoo's line), a WARNING line at 0.1 % (Gmail's
"keep it below"), and a floor of 1000 mails in the window before either acts. Memory store and
a :class:`ManualClock`."""

from __future__ import annotations

import logging

import pytest

from mailer import ManualClock
from mailer.records.reputation import Limits, Reputation, Thresholds, reputation_from_url
from mailer.settings import Settings

NEWS = "news@example.org"


def _reputation(minimum: int = 1000) -> Reputation:
    limits = Limits(Thresholds.parse("complaint 0.3%"), window=86_400.0, minimum=minimum)
    return reputation_from_url("memory://", limits, clock=ManualClock(1000.0))


def _send(rep: Reputation, count: int) -> None:
    for n in range(count):
        rep.count_sent(NEWS, "newsletter", f"<m{n}@example.org>")


def test_settings_take_the_providers_complaint_rate_and_a_floor_of_a_thousand() -> None:
    """``bounce 5%`` alone pauses on complaints at 0.3 % too; ``on`` is the providers' rate
    alone; the floor is 1000 mails unless set."""
    settings = Settings.from_env({"MAILGUARD_REPUTATION": "bounce 5%"})
    assert settings.reputation == Thresholds(0.003, 0.05)
    assert settings.reputation_min == 1000
    assert Settings.from_env({"MAILGUARD_REPUTATION": "on"}).reputation == Thresholds(0.003)
    given = Settings.from_env({"MAILGUARD_REPUTATION": "complaint 1%"})
    assert given.reputation == Thresholds(0.01)
    assert Settings.from_env({}).reputation is None


def test_one_complaint_in_a_thousand_warns_without_pausing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """1000 mails and one complaint (0.1 %): one WARNING line naming the rate and the pause's
    rate; not paused."""
    rep = _reputation()
    _send(rep, 1000)
    with caplog.at_level(logging.WARNING, logger="mailguard"):
        counted = rep.count_event("complained", "<m7@example.org>")
    assert counted is not None and not counted.standing.paused
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "sender news@example.org: complaint rate 0.1% at or over the warning 0.1% (1 complaints, "
        "1000 mails sent in the window); its bulk kinds pause at 0.3%"
    ]


def test_three_complaints_in_a_thousand_pause() -> None:
    """1000 mails and three complaints (0.3 %): paused."""
    rep = _reputation()
    _send(rep, 1000)
    found = [rep.count_event("complained", f"<m{n}@example.org>") for n in range(3)]
    assert [c is not None and c.standing.paused for c in found] == [False, False, True]


def test_under_the_floor_neither_warns_nor_pauses(caplog: pytest.LogCaptureFixture) -> None:
    """999 mails and five complaints (0.5 %): under the floor, no warning and no pause."""
    rep = _reputation()
    _send(rep, 999)
    with caplog.at_level(logging.WARNING, logger="mailguard"):
        found = [rep.count_event("complained", f"<m{n}@example.org>") for n in range(5)]
    assert all(c is not None and not c.standing.paused for c in found)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_complaint_below_the_warning_rate_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """2000 mails, one complaint (0.05 %): no line."""
    rep = _reputation()
    _send(rep, 2000)
    with caplog.at_level(logging.WARNING, logger="mailguard"):
        rep.count_event("complained", "<m1@example.org>")
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
