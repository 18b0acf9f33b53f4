"""The sender reputation's contract, run on memory and on a real Redis (``lua/count.lua``): rates
over a rolling window of buckets, the pause at a threshold above the minimum volume, its lift
by itself and by hand, webhook events attributed by Message-ID, and a bounded number of keys.
Time is a :class:`ManualClock`: no test waits through a window."""

from __future__ import annotations

import logging

import pytest
import redis

from mailer import ManualClock
from mailer.records.reputation import Limits, Reputation, Thresholds, reputation_from_url

DAY = 86_400.0
NEWS = "News <News@Example.org>"


@pytest.fixture
def make_reputation(backend_url: str, clock: ManualClock) -> object:
    def build(thresholds: str = "complaint 10%, bounce 20%", minimum: int = 10) -> Reputation:
        limits = Limits(Thresholds.parse(thresholds), window=DAY, minimum=minimum)
        return reputation_from_url(
            backend_url, limits, clock=clock, default_sender="orders@example.org"
        )

    return build


def _send(rep: Reputation, count: int, sender: str = NEWS, kind: str = "newsletter") -> None:
    for n in range(count):
        rep.count_sent(sender, kind, f"<m{n}-{kind}@example.org>")


def test_a_complaint_rate_at_its_threshold_pauses_and_says_so_in_an_error_line(
    make_reputation: object, caplog: pytest.LogCaptureFixture
) -> None:
    """Ten mails sent, one complaint (10 %): paused, with an ERROR line naming the rate and the
    threshold; the sender is the From address, lower case."""
    rep = make_reputation()  # type: ignore[operator]
    _send(rep, 10)
    with caplog.at_level(logging.ERROR, logger="mailguard"):
        counted = rep.count_event("complained", "<m3-newsletter@example.org>")
    assert counted is not None and counted.transition == "paused"
    standing = counted.standing
    assert (standing.sender, standing.sent, standing.complained) == ("news@example.org", 10, 1)
    assert standing.paused and standing.pause is not None and standing.pause.rate == "complaint"
    assert "complaint rate 10% crossed the threshold 10%" in caplog.text
    assert rep.pause_of(NEWS) is not None and rep.pause_of(NEWS).paused  # type: ignore[union-attr]


def test_no_rate_counts_below_the_minimum_volume(make_reputation: object) -> None:
    """Nine mails and three complaints: under the minimum (10), no pause."""
    rep = make_reputation()  # type: ignore[operator]
    _send(rep, 9)
    for n in range(3):
        counted = rep.count_event("complained", f"<m{n}-newsletter@example.org>")
        assert counted is not None and not counted.standing.paused


def test_the_pause_lifts_by_itself_when_more_mails_lower_the_rate(make_reputation: object) -> None:
    """Paused at 1/10; mails of other kinds still count: at 1/11 the rate is under 10 %."""
    rep = make_reputation()  # type: ignore[operator]
    _send(rep, 10)
    rep.count_event("complained", "<m0-newsletter@example.org>")
    counted = rep.count_sent(NEWS, "code", "<c1@example.org>")
    assert counted.transition == "lifted" and not counted.standing.paused
    assert counted.standing.pause is not None and counted.standing.pause.lifted_by == "auto"


def test_events_leave_the_window_bucket_by_bucket(
    make_reputation: object, clock: ManualClock
) -> None:
    """A complaint ages out of the 24 h window (an hour's bucket at a time): the pause lifts at
    the next check; the mails of a day ago leave too."""
    rep = make_reputation(minimum=1)  # type: ignore[operator]
    _send(rep, 10)
    rep.count_event("complained", "<m1-newsletter@example.org>")
    clock.advance(DAY - 3600)
    assert rep.check(NEWS).paused, "still within the window"
    clock.advance(7200)
    standing = rep.check(NEWS)
    assert (standing.sent, standing.complained, standing.paused) == (0, 0, False)


def test_a_webhook_event_is_attributed_by_the_message_id(make_reputation: object) -> None:
    """A complaint for a login code's Message-ID counts against that code's sender; one whose
    Message-ID was never marked counts against MAILGUARD_SENDER; other events count nothing."""
    rep = make_reputation()  # type: ignore[operator]
    _send(rep, 10)
    _send(rep, 10, sender="codes@example.org", kind="code")
    counted = rep.count_event("complained", "m2-code@example.org")  # brackets or not: one id
    assert counted is not None and counted.standing.sender == "codes@example.org"
    unknown = rep.count_event("bounced", "<never@example.org>")
    assert unknown is not None and unknown.standing.sender == "orders@example.org"
    assert rep.count_event("delivered", "<m1-code@example.org>") is None
    news = rep.check(NEWS)
    assert (news.complained, news.bounced, news.paused) == (0, 0, False)


def test_resume_by_hand_forgives_and_records_who_and_when(
    make_reputation: object, clock: ManualClock
) -> None:
    """A resume lifts the pause, forgives the window's events and records who and when; the
    next count does not pause again (the events are gone); new complaints may."""
    rep = make_reputation()  # type: ignore[operator]
    _send(rep, 10)
    rep.count_event("complained", "<m1-newsletter@example.org>")
    clock.advance(60)
    standing = rep.resume(NEWS, "alice@ops")
    pause = standing.pause
    assert pause is not None and not pause.paused
    assert (pause.lifted_by, pause.lifted_at) == ("alice@ops", clock())
    assert pause.forgiven == {"bounced": 0, "complained": 1}
    assert not rep.count_sent(NEWS, "newsletter", "<late@example.org>").standing.paused
    rep.count_event("complained", "<late@example.org>")  # 1/11: under 10 %
    again = rep.count_event("complained", "<late@example.org>")  # 2/11
    assert again is not None and again.transition == "paused"
    assert [s.sender for s in rep.standings()] == ["news@example.org"]


def test_a_hard_bounce_in_an_smtp_reply_counts_as_sent_and_bounced(make_reputation: object) -> None:
    rep = make_reputation("bounce 20%", minimum=5)  # type: ignore[operator]
    _send(rep, 4)
    counted = rep.count_bounce(NEWS, sent=True)
    assert (counted.standing.sent, counted.standing.bounced) == (5, 1)
    assert counted.transition == "paused" and counted.standing.pause.rate == "bounce"  # type: ignore[union-attr]


def test_keys_per_sender_stay_bounded(redis_url: str, clock: ManualClock) -> None:
    """Three days of mail, one an hour: one counts hash (at most 24 buckets of 3 counters and
    their sums) and one pause key per sender, and one marks hash per bucket for everyone."""
    limits = Limits(Thresholds.parse("complaint 50%"), window=DAY, minimum=1)
    rep = reputation_from_url(redis_url, limits, clock=clock)
    for hour in range(72):
        rep.count_sent(NEWS, "newsletter", f"<h{hour}@example.org>")
        rep.count_event("complained", f"<h{hour}@example.org>")
        clock.advance(3600)
    client = redis.Redis.from_url(redis_url)
    keys = [k.decode() for k in client.keys("mailguard:{reputation}:*")]
    counts = [k for k in keys if ":counts:" in k]
    assert len(counts) == 1 and len([k for k in keys if ":pause:" in k]) == 1
    assert client.hlen(counts[0]) <= 24 * 3 + 5
    assert all(client.pttl(k) > 0 for k in keys if ":marks:" in k)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("complaint 0.3%, bounce 5%", Thresholds(0.003, 0.05)),
        ("bounce 10 %", Thresholds(None, 0.1)),
    ],
)
def test_thresholds_parse(text: str, expected: Thresholds) -> None:
    assert Thresholds.parse(text) == expected


@pytest.mark.parametrize("text", ["complaints 0.3%", "complaint 0.3", "bounce 0%", "bounce 101%"])
def test_bad_thresholds_are_one_line(text: str) -> None:
    with pytest.raises(ValueError, match=r"complaint|percentage") as caught:
        Thresholds.parse(text)
    assert "\n" not in str(caught.value)
