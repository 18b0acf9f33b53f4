"""The limiter's behaviour, run on every backend (memory and a real Redis) by one shared suite."""

from __future__ import annotations

import pytest

from mailer import Limiter, ManualClock, Policy, Tier
from tests.conftest import LimiterFactory

ADA = "ada@example.com"
DAY = 86_400.0


def test_first_mail_is_allowed_and_reports_room_left(make_limiter: LimiterFactory) -> None:
    """Given an empty log, when a mail is acquired, then it is allowed with each tier's room."""
    decision = make_limiter().acquire(ADA)
    assert decision.allowed and not decision.booked and not decision.refused
    assert decision.wait == 0.0
    assert decision.tier is None
    assert decision.remaining == (0, 4, 9)


def test_second_mail_within_a_minute_waits_exactly_the_minute(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """Given one mail sent, a mail 15.25 s later is refused: 44.75 s to wait on the 1/60s tier."""
    limiter = make_limiter()
    limiter.acquire(ADA)
    clock.advance(15.25)
    decision = limiter.acquire(ADA)
    assert decision.refused
    assert decision.wait_ms == 44_750
    assert decision.tier == Tier(1, 60_000)
    assert decision.at == pytest.approx(1_700_000_060.0)


def test_refusal_consumes_nothing(make_limiter: LimiterFactory, clock: ManualClock) -> None:
    """Many refused attempts do not push the next admission back (all or nothing)."""
    limiter = make_limiter()
    limiter.acquire(ADA)
    for _ in range(20):
        clock.advance(1)
        assert limiter.acquire(ADA).refused
    clock.advance(40)
    assert limiter.acquire(ADA).allowed


def test_retry_after_is_exact_to_the_millisecond(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """An attempt 1 ms before now + wait is refused; one at now + wait is allowed."""
    limiter = make_limiter()
    limiter.acquire(ADA)
    clock.advance(0.3337)
    wait = limiter.acquire(ADA).wait_ms
    start = clock.now
    clock.set(start + (wait - 1) / 1000)
    assert limiter.acquire(ADA).refused
    clock.set(start + wait / 1000)
    assert limiter.acquire(ADA).allowed


def test_binding_tier_is_the_one_with_the_longest_wait(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """With the hour tier full, the hour tier's wait is reported, not the minute tier's."""
    limiter = make_limiter()
    for _ in range(5):
        assert limiter.acquire(ADA).allowed
        clock.advance(61)
    clock.set(1_700_000_000.0 + 5 * 61 + 1.6)  # last send 62.6 s ago: the minute tier is free
    decision = limiter.acquire(ADA)
    assert decision.refused
    assert decision.tier == Tier(5, 3_600_000)
    assert decision.wait_ms == 3_600_000 - 306_600  # the first send leaves the hour


def test_day_tier_binds_after_ten_mails(make_limiter: LimiterFactory, clock: ManualClock) -> None:
    """Ten mails hours apart fill the day tier; the eleventh waits for the first to age out."""
    limiter = make_limiter()
    for _ in range(10):
        assert limiter.acquire(ADA).allowed
        clock.advance(3_600)
    decision = limiter.acquire(ADA)
    assert decision.tier == Tier(10, 86_400_000)
    assert decision.wait == DAY - 10 * 3_600


def test_keys_do_not_interfere(make_limiter: LimiterFactory) -> None:
    """Filling one recipient's tiers leaves another recipient untouched."""
    limiter = make_limiter()
    limiter.acquire(ADA)
    assert limiter.acquire(ADA).refused
    assert limiter.acquire("bob@example.com").allowed


def test_policies_with_different_names_do_not_share_counts(make_limiter: LimiterFactory) -> None:
    """Two limiters on the same storage with differently named policies count separately."""
    one = make_limiter(Policy.parse("1/60s", name="recipient"))
    other = make_limiter(Policy.parse("1/60s", name="domain"))
    assert one.acquire(ADA).allowed
    assert other.acquire(ADA).allowed
    assert one.acquire(ADA).refused


def test_reservations_give_ten_distinct_ordered_slots(make_limiter: LimiterFactory) -> None:
    """Ten mails queued at once get ten distinct, increasing, policy-respecting times."""
    limiter = make_limiter()
    decisions = [limiter.acquire(ADA, mail_id=f"m{i}", max_wait=DAY) for i in range(10)]
    assert decisions[0].allowed
    assert all(d.booked for d in decisions[1:])
    offsets = [d.at_ms - decisions[0].at_ms for d in decisions]
    assert offsets == [
        0,
        60_000,
        120_000,
        180_000,
        240_000,
        3_600_000,
        3_660_000,
        3_720_000,
        3_780_000,
        3_840_000,
    ]
    assert [d.wait_ms for d in decisions] == offsets


def test_reservation_beyond_max_wait_is_refused_and_consumes_nothing(
    make_limiter: LimiterFactory,
) -> None:
    """A wait longer than max_wait is refused with the exact wait, and books nothing."""
    limiter = make_limiter()
    limiter.acquire(ADA, mail_id="a", max_wait=300)
    limiter.acquire(ADA, mail_id="b", max_wait=300)  # booked at +60 s
    refused = limiter.acquire(ADA, mail_id="c", max_wait=100)  # would be +120 s
    assert refused.refused and refused.wait_ms == 120_000
    assert limiter.acquire(ADA, mail_id="d", max_wait=120).at_ms == refused.at_ms


def test_booked_mail_is_allowed_when_it_wakes(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """A deferred mail acquiring again at its booked time is allowed, consuming nothing more."""
    limiter = make_limiter()
    limiter.acquire(ADA, mail_id="first", max_wait=DAY)
    booked = limiter.acquire(ADA, mail_id="second", max_wait=DAY)
    assert booked.booked
    clock.set(booked.at)
    again = limiter.acquire(ADA, mail_id="second", max_wait=DAY)
    assert again.allowed and again.at_ms == booked.at_ms
    assert limiter.acquire(ADA, mail_id="third", max_wait=DAY).at_ms == booked.at_ms + 60_000


def test_acquire_is_idempotent_per_mail_id(make_limiter: LimiterFactory) -> None:
    """Acquiring twice with one mail id returns the same slot and uses one slot only."""
    limiter = make_limiter()
    first = limiter.acquire(ADA, mail_id="m1")
    again = limiter.acquire(ADA, mail_id="m1")
    assert first.allowed and again.allowed and again.at_ms == first.at_ms
    assert limiter.peek(ADA).remaining == (0, 4, 9)


def test_early_wakeup_of_a_booking_is_told_to_wait_again(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """A booked mail that comes back early (broker redelivery) gets its own slot, not a new one."""
    limiter = make_limiter()
    limiter.acquire(ADA, mail_id="a", max_wait=DAY)
    booked = limiter.acquire(ADA, mail_id="b", max_wait=DAY)
    clock.advance(20)
    early = limiter.acquire(ADA, mail_id="b", max_wait=DAY)
    assert early.booked and early.at_ms == booked.at_ms and early.wait_ms == 40_000


def test_release_gives_the_slot_back(make_limiter: LimiterFactory) -> None:
    """Releasing an admitted mail's slot lets the next mail go at once; unknown ids are False."""
    limiter = make_limiter()
    limiter.acquire(ADA, mail_id="failed")
    assert limiter.acquire(ADA).refused
    assert limiter.release(ADA, "failed") is True
    assert limiter.release(ADA, "failed") is False
    assert limiter.release(ADA, "never-seen") is False
    assert limiter.acquire(ADA).allowed


def test_release_of_a_booking_frees_later_slots(make_limiter: LimiterFactory) -> None:
    """Releasing the last booking lets the next mail take that same time."""
    limiter = make_limiter()
    limiter.acquire(ADA, mail_id="a", max_wait=DAY)
    booked = limiter.acquire(ADA, mail_id="b", max_wait=DAY)
    assert limiter.release(ADA, "b")
    assert limiter.acquire(ADA, mail_id="c", max_wait=DAY).at_ms == booked.at_ms


def test_peek_answers_without_consuming(make_limiter: LimiterFactory, clock: ManualClock) -> None:
    """peek tells allowed / retry-after as acquire would, and never records anything."""
    limiter = make_limiter()
    for _ in range(3):
        assert limiter.peek(ADA).allowed
    assert limiter.peek(ADA).remaining == (1, 5, 10)
    limiter.acquire(ADA)
    clock.advance(18)
    seen = limiter.peek(ADA)
    assert not seen.allowed and seen.wait_ms == 42_000 and seen.tier == Tier(1, 60_000)
    assert limiter.acquire(ADA).wait_ms == 42_000


def test_reset_forgets_a_key(make_limiter: LimiterFactory) -> None:
    """After reset, a recipient starts from an empty log."""
    limiter = make_limiter()
    limiter.acquire(ADA)
    limiter.reset(ADA)
    assert limiter.acquire(ADA).allowed


def test_window_slides(make_limiter: LimiterFactory, clock: ManualClock) -> None:
    """A mail exactly one window after the previous one is allowed (windows are (t-W, t])."""
    limiter = make_limiter("1/1s")
    assert limiter.acquire(ADA).allowed
    clock.advance(0.999)
    assert limiter.acquire(ADA).refused
    clock.advance(0.001)
    assert limiter.acquire(ADA).allowed


def test_acquire_many_matches_single_calls(make_limiter: LimiterFactory) -> None:
    """acquire_many answers in order, exactly as single acquires would, keys repeated or not."""
    limiter = make_limiter()
    keys = ["a@x.org", "b@x.org", "a@x.org", "c@x.org", "a@x.org"]
    decisions = limiter.acquire_many(keys, mail_ids=[f"m{i}" for i in range(5)], max_wait=DAY)
    assert [(d.allowed, d.booked, d.wait_ms) for d in decisions] == [
        (True, False, 0),
        (True, False, 0),
        (False, True, 60_000),
        (True, False, 0),
        (False, True, 120_000),
    ]
    assert limiter.acquire_many([]) == []
    with pytest.raises(ValueError, match="one entry per key"):
        limiter.acquire_many(["a@x.org"], mail_ids=[])


@pytest.mark.parametrize("key", ["", "x" * 1025, None, 42, b"bytes"])
def test_bad_keys_are_refused(make_limiter: LimiterFactory, key: object) -> None:
    """A key that is not a non-empty str of at most 1024 characters raises ValueError."""
    limiter = make_limiter()
    with pytest.raises(ValueError, match="limiter key"):
        limiter.acquire(key)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limiter key"):
        limiter.peek(key)  # type: ignore[arg-type]


@pytest.mark.parametrize("max_wait", [-1.0, float("nan"), 8 * DAY])
def test_bad_max_wait_is_refused(make_limiter: LimiterFactory, max_wait: float) -> None:
    """A negative, NaN or over-long max_wait raises ValueError."""
    with pytest.raises(ValueError, match="max_wait"):
        make_limiter().acquire(ADA, max_wait=max_wait)


@pytest.mark.parametrize("mail_id", ["", "x" * 256])
def test_bad_mail_ids_are_refused(make_limiter: LimiterFactory, mail_id: str) -> None:
    """An empty or over-long mail id raises ValueError."""
    with pytest.raises(ValueError, match="mail_id"):
        make_limiter().acquire(ADA, mail_id=mail_id)


def test_unknown_url_scheme_is_refused() -> None:
    """A URL of no supported scheme raises ValueError naming the supported ones."""
    with pytest.raises(ValueError, match=r"memory://, redis://"):
        Limiter.from_url("mongodb://u:secret@host/db", Policy.parse("1/1s"))
    with pytest.raises(ValueError, match=r"\*\*\*"):
        Limiter.from_url("ftp://u:secret@host/", Policy.parse("1/1s"))


def test_new_mail_never_jumps_ahead_of_a_booking(make_limiter: LimiterFactory) -> None:
    """After two bookings are released, a new mail is booked after the remaining later booking."""
    limiter = make_limiter("2/10s")
    for mail_id in ("a", "b", "b1", "b2", "b3"):
        limiter.acquire(ADA, mail_id=mail_id, max_wait=DAY)
    assert limiter.release(ADA, "b1") and limiter.release(ADA, "b2")
    decision = limiter.acquire(ADA, mail_id="c", max_wait=DAY)
    assert decision.booked and decision.wait_ms == 20_000  # b3's time, not 10 s
    assert decision.tier == Tier(2, 10_000)  # the full tier, though the order binds longer


def test_never_early_by_a_fraction_of_a_millisecond(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """Under 1/200ms, a mail 199.2 ms after the previous one waits: now is cut down, stored up."""
    limiter = make_limiter("1/200ms")
    clock.set(1_700_000_000.0009)  # 0.9 ms into a millisecond
    assert limiter.acquire("ada@example.com").allowed
    clock.advance(0.1992)  # 199.2 ms later: whole ms 0 and 200 would have said 200 ms apart
    early = limiter.acquire("ada@example.com")
    assert early.refused and early.wait_ms == 1
    clock.set(early.at)  # 200.1 ms after the first, at the time the refusal named
    assert limiter.acquire("ada@example.com").allowed


def test_a_burst_in_one_millisecond_is_not_delayed(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """Storing admissions rounded up does not delay other mails within the same millisecond."""
    limiter = make_limiter("3/1s")
    clock.set(1_700_000_000.0004)
    assert [limiter.acquire("ada@example.com").allowed for _ in range(4)] == [True] * 3 + [False]


# --- not_before: a hold's end ------------------------------------------------------------------


def test_not_before_books_the_first_admissible_slot_after_a_hold(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """A mail that could go now, asked with not_before 30 s ahead, is booked at exactly that
    time (no tier binds); one whose tier already waits longer keeps the tier's slot."""
    limiter = make_limiter()
    start = clock()
    held = limiter.acquire(ADA, mail_id="m1", max_wait=DAY, not_before=start + 30.0005)
    assert held.booked and held.at_ms == round(start * 1000) + 30_001, "rounded up: never early"
    assert held.tier is None
    later = limiter.acquire(ADA, mail_id="m2", max_wait=DAY, not_before=start + 31)
    assert later.booked and later.wait == 90.001 and str(later.tier) == "1/1m"
    again = limiter.acquire(ADA, mail_id="m1", max_wait=DAY, not_before=start + 500)
    assert again.at_ms == held.at_ms, "the same mail id gets its slot back"


def test_not_before_past_max_wait_is_refused_and_consumes_nothing(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """A hold that ends beyond what the mail tolerates refuses it, saying when it could go."""
    limiter = make_limiter()
    refused = limiter.acquire(ADA, mail_id="m1", max_wait=10, not_before=clock() + 60)
    assert refused.refused and refused.wait == 60.0
    assert limiter.acquire(ADA).allowed, "nothing was consumed"


def test_not_before_in_the_past_changes_nothing(
    make_limiter: LimiterFactory, clock: ManualClock
) -> None:
    """A hold that already ended: the mail goes now."""
    assert make_limiter().acquire(ADA, not_before=clock() - 5).allowed


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, "soon"])
def test_a_bad_not_before_is_refused(make_limiter: LimiterFactory, bad: object) -> None:
    with pytest.raises(ValueError, match="not_before must be epoch seconds"):
        make_limiter().acquire(ADA, not_before=bad)  # type: ignore[arg-type]


def test_the_old_wait_names_still_read_but_warn(make_limiter: LimiterFactory) -> None:
    """``retry_after`` and ``retry_after_ms`` read ``wait`` and ``wait_ms``, with a warning."""
    limiter = make_limiter()
    limiter.acquire(ADA)
    refused = limiter.acquire(ADA)
    with pytest.warns(DeprecationWarning, match="Decision.wait_ms"):
        assert refused.retry_after_ms == refused.wait_ms == 60_000
    with pytest.warns(DeprecationWarning, match="Decision.wait "):
        assert refused.retry_after == refused.wait == 60.0
