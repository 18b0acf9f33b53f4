"""The policy simulator: hand-computed small traces, CSV parsing, generated patterns, speed."""

from __future__ import annotations

import io
import itertools
from bisect import bisect_right

import pytest

from mailer import Kind, Kinds, Policy
from mailer.simulate import (
    ABUSED,
    ORDER,
    PATTERNS,
    Attempt,
    Summary,
    compare,
    generate,
    percentile,
    read_csv,
    simulate,
)

POLICY = Policy.parse("1/60s, 3/1h", name="recipient")


def kinds() -> Kinds:
    return Kinds.defaults().with_kind(Kind("now", max_wait=0))


def test_a_burst_is_sent_booked_then_dropped_as_computed_by_hand() -> None:
    """Attempts at 0, 10, 20, 30 s (code, 5 min): sent, booked at 60 and 120, then dropped."""
    trace = [Attempt(t, "ada@example.com", "code") for t in (0, 10, 20, 30)]
    report = simulate(trace, POLICY, kinds())
    statuses = [(r.status, r.lateness, r.tier) for r in report.results]
    assert statuses == [
        ("sent", 0.0, None),
        ("deferred", 50.0, "1/1m"),  # slot at 60
        ("deferred", 100.0, "1/1m"),  # slot at 120
        ("dropped", 3570.0, "3/1h"),  # 3/1h frees at 3600: 3570 s > 300 s
    ]
    assert [r.sent_at for r in report.results] == [0.0, 60.0, 120.0, None]
    assert report.total == Summary(4, 1, 2, 1, 50.0, 100.0, 100.0)
    assert report.per_tier["1/1m"].deferred == 2 and report.per_tier["1/1m"].dropped == 0
    assert report.per_tier["3/1h"].dropped == 1 and report.per_tier["3/1h"].deferred == 0
    assert report.recipients == 1 and report.duration == 30.0


def test_a_kind_that_may_not_wait_is_dropped_at_once() -> None:
    """A kind with max_wait 0 is dropped whenever it cannot go now, naming the binding tier."""
    trace = [Attempt(0, "bob@example.com", "now"), Attempt(59.999, "bob@example.com", "now")]
    report = simulate(trace, POLICY, kinds())
    assert [r.status for r in report.results] == ["sent", "dropped"]
    assert report.results[1].lateness == pytest.approx(0.001)
    assert report.per_kind["now"].dropped == 1 and report.per_kind["now"].sent == 1


def test_address_variants_share_one_budget_as_in_the_worker() -> None:
    """'Ada+1@Example.com' and 'ada@example.com' share a budget; another address does not."""
    trace = [
        Attempt(0, "ada@example.com", "notice"),
        Attempt(1, "Ada+1@Example.com", "notice"),
        Attempt(2, "bob@example.com", "notice"),
    ]
    report = simulate(trace, POLICY, kinds())
    assert [(r.status, r.lateness) for r in report.results] == [
        ("sent", 0.0),
        ("deferred", 59.0),
        ("sent", 0.0),
    ]
    assert report.recipients == 2
    assert report.results[0].recipient == report.results[1].recipient != report.results[2].recipient


def test_attempts_are_replayed_in_time_order_and_reported_in_trace_order() -> None:
    """An out-of-order trace is replayed by time (ties in trace order); results keep the order."""
    trace = [
        Attempt(100, "ada@example.com", "notice"),
        Attempt(0, "ada@example.com", "notice"),
        Attempt(0, "ada@example.com", "notice"),
    ]
    report = simulate(trace, POLICY, kinds())
    assert [(r.status, r.sent_at) for r in report.results] == [
        ("deferred", 120.0),  # replayed third: after the slots at 0 and 60
        ("sent", 0.0),
        ("deferred", 60.0),
    ]


def test_per_kind_summaries_split_the_total() -> None:
    """Per-kind counts add up to the total, and each kind's lateness is its own."""
    trace = [
        Attempt(0, "ada@example.com", "notice"),
        Attempt(30, "ada@example.com", "notice"),
        Attempt(31, "ada@example.com", "code"),
    ]
    report = simulate(trace, POLICY, kinds())
    assert report.per_kind["notice"] == Summary(2, 1, 1, 0, 30.0, 30.0, 30.0)
    assert report.per_kind["code"] == Summary(1, 0, 1, 0, 89.0, 89.0, 89.0)  # slot at 120
    assert report.total.delivered == 3


def test_percentile_is_nearest_rank() -> None:
    """p50 and p95 use the nearest rank of the sorted lateness; empty gives None."""
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 50) == 10.0
    assert percentile(values, 95) == 19.0
    assert percentile(values, 100) == 20.0
    assert percentile([], 50) is None


def test_an_invalid_address_or_kind_in_a_trace_is_named_by_its_place() -> None:
    """simulate raises ValueError naming the attempt, never repeating the address."""
    with pytest.raises(ValueError, match=r"^attempt 0: address has no @-sign$"):
        simulate([Attempt(0, "no-at-sign")], POLICY)
    with pytest.raises(ValueError, match=r"^line 7: unknown kind 'spam'"):
        simulate([Attempt(0, "ada@example.com", "spam", line=7)], POLICY)


CSV = """\
time,recipient,kind
# a comment line

0,ada@example.com,code
10,ada@example.com
20.5,"bob@example.com",notice
"""


def test_read_csv_skips_header_comments_and_blank_lines() -> None:
    """A header, comments and blank lines are skipped; a missing kind is default."""
    attempts = read_csv(io.StringIO(CSV))
    assert attempts == [
        Attempt(0.0, "ada@example.com", "code", 4),
        Attempt(10.0, "ada@example.com", "default", 5),
        Attempt(20.5, "bob@example.com", "notice", 6),
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("abc,ada@example.com", r"^line 3: time 'abc' is not a number of seconds$"),
        ("-1,ada@example.com", r"^line 3: time must be a finite number >= 0, got '-1'$"),
        ("nan,ada@example.com", r"^line 3: time must be a finite number >= 0, got 'nan'$"),
        ("5", r"^line 3: expected time,recipient\[,kind\[,tenant\]\], got 1 fields$"),
        (
            "5,ada@example.com,code,acme,x",
            r"^line 3: expected time,recipient\[,kind\[,tenant\]\], got 5 fields$",
        ),
        ("5,ada@example.com,code,\x01", r"^line 3: tenant must not contain control characters$"),
        ("5,ada@example.com,code," + "t" * 65, r"^line 3: tenant must be a str of 1 to 64"),
        ("5,ada@", r"^line 3: address has no @-sign|^line 3: domain part"),
        ("5,ada@example.com,spam", r"^line 3: unknown kind 'spam'; known: code, default"),
    ],
)
def test_a_broken_csv_line_raises_value_error_naming_the_line(line: str, message: str) -> None:
    """Each kind of broken row is reported with its line number and what is wrong."""
    text = f"0,ada@example.com\n10,ada@example.com,code\n{line}\n"
    with pytest.raises(ValueError, match=message) as caught:
        read_csv(io.StringIO(text))
    assert "ada@example.com" not in str(caught.value)


def test_read_csv_knows_configured_kinds() -> None:
    """A kind added by configuration is accepted when its registry is passed."""
    attempts = read_csv(io.StringIO("0,ada@example.com,now\n"), kinds=kinds())
    assert attempts[0].kind == "now"


@pytest.mark.parametrize("pattern", PATTERNS)
def test_generated_patterns_are_deterministic_and_ordered(pattern: str) -> None:
    """The same seed gives the same trace, in time order, within the duration."""
    first = generate(pattern, recipients=50, seed=3)
    assert first == generate(pattern, recipients=50, seed=3)
    assert first != generate(pattern, recipients=50, seed=4)
    times = [a.time for a in first]
    assert times == sorted(times) and times[0] >= 0 and times[-1] < 86_400


def test_unknown_pattern_is_refused() -> None:
    """An unknown pattern name raises ValueError listing the known ones."""
    with pytest.raises(ValueError, match="unknown pattern 'waves'; known: day, steady"):
        generate("waves")


def test_the_built_in_day_shows_the_abused_address_as_most_limited() -> None:
    """In the day pattern the abused address tops the list, most of its codes dropped."""
    trace = generate("day", recipients=200)
    report = simulate(trace, Policy.parse("1/60s, 5/1h, 10/24h", name="recipient"), secret="s")
    abused = next(r.recipient for r in report.results if r.attempt.recipient == ABUSED)
    label, summary = report.top_recipients(1)[0]
    assert label == abused
    # One code every 15 s for an hour against 1/1m, 5/1h with 5 min tolerance: by hand, 1 sent
    # now, 4 booked a minute apart, then 5 more booked once the first hour's slots free up.
    assert (summary.attempts, summary.sent, summary.deferred, summary.dropped) == (240, 1, 9, 230)
    assert ABUSED not in label


def test_no_recipient_is_ever_over_a_tier_in_a_simulated_day() -> None:
    """Delivery times of every recipient respect every tier (at most L in any window W)."""
    policy = Policy.parse("1/60s, 5/1h, 10/24h", name="recipient")
    report = simulate(generate("bursts", recipients=300), policy)
    sends: dict[str, list[int]] = {}
    for result in report.results:
        if result.sent_at is not None:
            sends.setdefault(result.recipient, []).append(round(result.sent_at * 1000))
    assert report.total.deferred > 0
    assert list(report.per_tier) == ["1/1m", "5/1h", "10/1d"]
    for times in sends.values():
        times.sort()
        for tier in policy.tiers:
            for i, t in enumerate(times):
                in_window = i + 1 - bisect_right(times, t - tier.window_ms)  # (t - W, t]
                assert in_window <= tier.limit


def test_a_day_for_ten_thousand_recipients_judges_every_attempt() -> None:
    """A generated day of mixed traffic for 10 000 recipients: every attempt judged, each
    recipient counted (its speed is a figure of the how-to, not a bound asserted here)."""
    trace = generate("day", recipients=10_000)
    report = simulate(trace, Policy.parse("1/60s, 5/1h, 10/24h", name="recipient"))
    assert report.recipients == 10_001 and report.total.attempts == len(trace) > 20_000


# --- scoped policies -------------------------------------------------------------------------


def test_a_sender_tier_paces_mails_to_different_recipients() -> None:
    """``sender: 2/1s``: 6 mails to 6 recipients at t=0 go 2 at once, then 2 a second later."""
    attempts = [Attempt(0.0, f"r{n}@example.com") for n in range(6)]
    report = simulate(attempts, Policy.parse("recipient: 1/60s; sender: 2/1s", name="recipient"))
    assert [r.status for r in report.results] == ["sent"] * 2 + ["deferred"] * 4
    assert [r.lateness for r in report.results] == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    assert {r.tier for r in report.results[2:]} <= {"sender 2/1s", ORDER}
    assert report.per_tier["sender 2/1s"].deferred >= 2


def test_a_tenants_fixed_quota_counts_only_its_own_mails() -> None:
    """``tenant: 2/1d fixed``: acme's third mail waits for the next (UTC) day; others do not."""
    trace = "".join(
        f"{t},r{n}@example.com,default,{tenant}\n"
        for n, (t, tenant) in enumerate([(0, "acme"), (1, "acme"), (2, "acme"), (3, ""), (4, "b")])
    )
    attempts = read_csv(io.StringIO(trace))
    assert [a.tenant for a in attempts] == ["acme", "acme", "acme", None, "b"]
    report = simulate(
        attempts, Policy.parse("recipient: 1/60s; tenant: 2/1d fixed", name="recipient")
    )
    assert [r.status for r in report.results] == ["sent", "sent", "deferred", "sent", "sent"]
    assert report.results[2].tier == "tenant 2/1d fixed"
    assert report.results[2].sent_at == 86_400.0, "the trace starts at a midnight"


def test_compare_replays_one_trace_through_two_policies() -> None:
    """--against: the same attempts, the same recipient labels, each policy's own outcome."""
    attempts = generate("bursts", recipients=20, seed=3)
    plain = Policy.parse("1/60s, 5/1h", name="recipient")
    shared = Policy.parse("recipient: 1/60s, 5/1h; sender: 1/1s gcra", name="recipient")
    first, second = compare(attempts, plain, shared, secret="s")
    assert first.total.attempts == second.total.attempts == len(attempts)
    assert [r.recipient for r in first.results] == [r.recipient for r in second.results]
    assert first == simulate(attempts, plain, secret="s")
    assert second.total.deferred > first.total.deferred, "one a second for all adds waits"
    sent = sorted(r.sent_at for r in second.results if r.sent_at is not None)
    assert all(b - a >= 1.0 - 1e-9 for a, b in itertools.pairwise(sent)), "1/1s gcra"
