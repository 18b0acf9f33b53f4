"""The ledger's contract: what every ledger store promises (memory and a real Redis), one suite.

Memory runs on a :class:`ManualClock`; Redis expires keys by its own clock, so its tests use real
leases of a few hundred milliseconds at most and wait just past them. Each store is built by
:func:`~mailer.records.ledger.ledger_from_url`, as the workers build it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from mailer import ManualClock
from mailer.outcomes import Outcome
from mailer.records.ledger import (
    SENT_TTL,
    Ledger,
    MemoryLedger,
    RedisLedger,
    Superseded,
    Turn,
    ledger_from_url,
)
from mailer.storage import client_from_url

#: A lease short enough to wait out on a real Redis, in seconds; waits add a margin to it.
SHORT = 0.2
#: Waiting this long lets a SHORT lease run out on either backend.
PAST_SHORT = 0.25
#: A lease no test outlives, in seconds.
LONG = 60.0


@dataclass
class LedgerBench:
    """A ledger on one backend, and how to move its time forward."""

    ledger: Ledger
    let_pass: Callable[[float], None]
    outlive_outcome: Callable[[str], None]  # as if the recorded outcome's SENT_TTL ran out


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def ledger_bench(request: pytest.FixtureRequest) -> Iterator[LedgerBench]:
    """Each shared-suite test runs once per backend: the in-process dicts and a real Redis."""
    if request.param == "memory":
        clock = ManualClock()
        memory = ledger_from_url("memory://", clock=clock)
        assert isinstance(memory, MemoryLedger)
        yield LedgerBench(memory, clock.advance, lambda _mail_id: clock.advance(SENT_TTL))
        return
    url = str(request.getfixturevalue("redis_url"))
    client = client_from_url(url)
    ledger = ledger_from_url(url, client=client)
    assert isinstance(ledger, RedisLedger) and ledger.client is client
    yield LedgerBench(
        ledger,
        time.sleep,
        lambda mail_id: client.delete(f"mailguard:sent:{{{mail_id}}}"),  # what EX would do
    )
    client.close()


def sent(mail_id: str, **fields: object) -> Outcome:
    """A sent outcome of ``mail_id`` with every kind of field filled in (JSON round trip)."""
    values: dict[str, object] = {
        "status": "sent",
        "mail_id": mail_id,
        "kind": "welcome",
        "recipient": "h:0123abcd",
        "tier": "1/1m",
        "wait": 1.5,
        "attempts": 2,
        "deferrals": 1,
        "smtp_code": 250,
        "smtp_reply": "2.0.0 Ok: queued",
        "message_id": "<m@example.com>",
        "decided_at": 1_700_000_000.25,
        "sent_at": 1_700_000_001.5,
    }
    values.update(fields)
    return Outcome(**values)  # type: ignore[arg-type]


def test_begin_claims_a_new_mail(ledger_bench: LedgerBench) -> None:
    """A mail nobody claimed or sent is claimed by the first run that begins it."""
    assert ledger_bench.ledger.begin("m", "w1", LONG) is True
    assert ledger_bench.ledger.recorded("m") is None, "a claim is not an outcome"


def test_a_claim_held_by_another_owner_is_refused(ledger_bench: LedgerBench) -> None:
    """While w1 holds the claim, every other run is refused and w1 keeps it."""
    ledger = ledger_bench.ledger
    assert ledger.begin("m", "w1", LONG) is True
    assert ledger.begin("m", "w2", LONG) is False
    assert ledger.begin("m", "w3", LONG) is False
    assert ledger.begin("m", "w1", LONG) is True, "the refusals took nothing from w1"
    assert ledger.begin("other", "w2", LONG) is True, "claims are per mail id"


def test_the_owner_claims_again_with_a_fresh_lease(ledger_bench: LedgerBench) -> None:
    """The owner's second begin succeeds and replaces the lease: longer or shorter."""
    ledger = ledger_bench.ledger
    assert ledger.begin("lengthened", "w1", SHORT) is True
    assert ledger.begin("lengthened", "w1", LONG) is True
    assert ledger.begin("shortened", "w1", LONG) is True
    assert ledger.begin("shortened", "w1", SHORT) is True
    ledger_bench.let_pass(PAST_SHORT)
    assert ledger.begin("lengthened", "w2", LONG) is False, "the renewed lease still holds"
    assert ledger.begin("shortened", "w2", LONG) is True, "the renewed lease ran out"


def test_an_expired_lease_lets_another_owner_claim(ledger_bench: LedgerBench) -> None:
    """A claim whose lease ran out goes to the next run, and the old owner then is refused."""
    ledger = ledger_bench.ledger
    assert ledger.begin("m", "w1", SHORT) is True
    assert ledger.begin("m", "w2", LONG) is False
    ledger_bench.let_pass(PAST_SHORT)
    assert ledger.begin("m", "w2", LONG) is True
    assert ledger.begin("m", "w1", LONG) is False, "w1 lost the claim with its lease"


def test_unclaim_gives_the_claim_back_only_for_its_owner(ledger_bench: LedgerBench) -> None:
    """An unclaim by another run changes nothing; the owner's own unclaim frees the mail."""
    ledger = ledger_bench.ledger
    ledger.unclaim("m", "w1")  # nothing to give back: no error
    assert ledger.begin("m", "w1", LONG) is True
    ledger.unclaim("m", "w2")
    assert ledger.begin("m", "w2", LONG) is False
    ledger.unclaim("m", "w1")
    assert ledger.begin("m", "w2", LONG) is True


def test_a_late_unclaim_leaves_the_new_owners_claim(ledger_bench: LedgerBench) -> None:
    """An owner whose lease ran out and was taken over cannot drop the new owner's claim."""
    ledger = ledger_bench.ledger
    assert ledger.begin("m", "w1", SHORT) is True
    ledger_bench.let_pass(PAST_SHORT)
    assert ledger.begin("m", "w2", LONG) is True
    ledger.unclaim("m", "w1")
    assert ledger.begin("m", "w3", LONG) is False, "w2 still holds the claim"


def test_copies_of_an_earlier_turn_or_a_sibling_chain_are_superseded(
    ledger_bench: LedgerBench,
) -> None:
    """The ledger keeps the turn of the latest run that claimed: a run of an earlier turn, or
    of the same number from another parent (two copies of one run each handed the mail on),
    ends at begin and takes nothing; a later turn claims and is kept."""
    ledger = ledger_bench.ledger
    assert ledger.begin("m", "w1", LONG, turn=Turn(0)) is True
    ledger.unclaim("m", "w1")  # w1 handed the mail on: its next run carries Turn(1, "w1")
    assert ledger.begin("m", "twin", LONG, turn=Turn(0)) is True  # a copy of w1's message
    ledger.unclaim("m", "twin")  # ...which handed it on too: Turn(1, "twin")
    assert ledger.begin("m", "a", LONG, turn=Turn(1, "w1")) is True  # first of turn 1: kept
    ledger.unclaim("m", "a")
    assert ledger.begin("m", "b", LONG, turn=Turn(1, "twin")) == Superseded(1)  # its sibling
    assert ledger.begin("m", "c", LONG, turn=Turn(0)) == Superseded(1)  # an earlier turn
    assert ledger.begin("m", "d", LONG, turn=Turn(1, "w1")) is True, "a copy of turn 1's run"
    assert ledger.begin("m", "e", LONG, turn=None) is False, "unknown turn: the claim only"
    assert ledger.begin("m", "d", LONG, turn=Turn(2, "d")) is True  # d's own next run
    ledger.unclaim("m", "d")
    assert ledger.begin("m", "f", LONG, turn=Turn(1, "w1")) == Superseded(2)


def test_a_run_that_died_after_handing_on_leaves_the_mail_to_its_copy(
    ledger_bench: LedgerBench,
) -> None:
    """A run killed after it gave the claim back but before its next run was published (or
    ran) left the turn as it was: a copy of its message (a redelivery, the watchdog's) claims
    the mail after it. A stale begin takes no claim."""
    ledger = ledger_bench.ledger
    assert ledger.begin("m", "w1", SHORT, turn=Turn(3, "p")) is True
    ledger.unclaim("m", "w1")  # then died before publishing its next run
    assert ledger.begin("m", "copy", LONG, turn=Turn(3, "p")) is True
    ledger.unclaim("m", "copy")
    assert ledger.begin("m", "stale", LONG, turn=Turn(2, "q")) == Superseded(3)
    assert ledger.begin("m", "next", LONG, turn=Turn(4, "copy")) is True


def test_a_recorded_outcome_answers_every_copy_whatever_its_turn(ledger_bench: LedgerBench) -> None:
    """The outcome comes before the turn, and recording forgets the turn."""
    ledger = ledger_bench.ledger
    assert ledger.begin("m", "w1", LONG, turn=Turn(1, "p")) is True
    ledger.record(sent("m"))
    assert isinstance(ledger.begin("m", "stale", LONG, turn=Turn(0)), Outcome)
    assert isinstance(ledger.begin("m", "sibling", LONG, turn=Turn(1, "q")), Outcome)


def test_a_recorded_outcome_answers_every_later_begin(ledger_bench: LedgerBench) -> None:
    """Once recorded, every later begin of the mail, by any owner, returns the outcome."""
    ledger = ledger_bench.ledger
    outcome = sent("m")
    assert ledger.begin("m", "w1", LONG) is True
    ledger.record(outcome)
    for owner in ("w1", "w2", "w1", "w3"):
        assert ledger.begin("m", owner, LONG) == outcome, "a sent mail is never claimed again"
    ledger.unclaim("m", "w1")
    assert ledger.begin("m", "w2", LONG) == outcome, "unclaim does not undo a record"


def test_a_record_without_a_claim_still_answers_begin(ledger_bench: LedgerBench) -> None:
    """An outcome recorded for a mail nobody claimed is returned by its first begin."""
    outcome = sent("m", status="dropped", reason="invalid", smtp_code=None, smtp_reply=None)
    ledger_bench.ledger.record(outcome)
    assert ledger_bench.ledger.begin("m", "w1", LONG) == outcome


def test_record_drops_the_claim(ledger_bench: LedgerBench) -> None:
    """Recording drops the claim at once: after the outcome is gone, another run may claim."""
    ledger = ledger_bench.ledger
    assert ledger.begin("m", "w1", 2 * SENT_TTL) is True  # a lease that outlives the outcome
    ledger.record(sent("m"))
    ledger_bench.outlive_outcome("m")
    assert ledger.recorded("m") is None
    assert ledger.begin("m", "w2", LONG) is True, "no claim was left behind by the record"


def test_recorded_returns_the_latest_outcome_of_that_mail_only(ledger_bench: LedgerBench) -> None:
    """recorded() is None until an outcome is recorded, then the latest one, and per mail id."""
    ledger = ledger_bench.ledger
    assert ledger.recorded("m") is None
    assert ledger.begin("m", "w1", LONG) is True, "reading recorded() takes no claim"
    first = sent("m", status="failed", reason="smtp_permanent", smtp_code=550)
    ledger.record(first)
    assert ledger.recorded("m") == first
    ledger.record(sent("m"))
    assert ledger.recorded("m") == sent("m"), "a later record replaces the outcome"
    assert ledger.recorded("other") is None


def test_a_stale_claim_is_taken_over_by_name_only(ledger_bench: LedgerBench) -> None:
    """``takeover`` takes a claim held by that owner at once; any other holder still refuses."""
    ledger = ledger_bench.ledger
    assert ledger.begin("m", "lost", LONG) is True  # written after its run gave up
    assert ledger.begin("m", "next", LONG, takeover="someone-else") is False
    assert ledger.begin("m", "next", LONG, takeover="lost") is True
    assert ledger.begin("m", "copy", LONG, takeover="lost") is False, "only from that owner"
    ledger.unclaim("m", "lost")  # the stale owner can no longer give it away
    assert ledger.begin("m", "copy", LONG) is False


def test_dropped_and_failed_outcomes_are_final_too(ledger_bench: LedgerBench) -> None:
    """A recorded dropped or failed outcome answers every later begin, like a sent one."""
    ledger = ledger_bench.ledger
    for status in ("dropped", "failed"):
        outcome = sent(f"m-{status}", status=status, reason="rate_limited", sent_at=None)
        assert ledger.begin(outcome.mail_id, "w1", LONG) is True
        ledger.record(outcome)
        assert ledger.begin(outcome.mail_id, "w2", LONG) == outcome


def test_handoffs_count_only_while_no_run_ends(ledger_bench: LedgerBench) -> None:
    """Each hand-off of a copy counts; any run that ends (unclaim, record) resets the count."""
    ledger = ledger_bench.ledger
    assert [ledger.handoff("m") for _ in range(3)] == [1, 2, 3]
    assert ledger.begin("m", "w1", LONG) is True
    assert ledger.handoff("m") == 0, "a run holds the claim: not counted"
    ledger.unclaim("m", "w1")
    assert ledger.handoff("m") == 1, "the run ended: counting starts again"
    ledger.record(sent("m"))
    assert ledger.handoff("m") == 0, "a finished mail is never counted"


def test_a_quarantined_mail_is_final_and_listed_newest_first(ledger_bench: LedgerBench) -> None:
    """quarantine records the outcome (final) and lists it among the dead letters."""
    ledger = ledger_bench.ledger
    assert ledger.dead_letters() == []
    first = Outcome(status="dropped", mail_id="p1", kind="code", reason="poison", decided_at=1.0)
    second = first.but(mail_id="p2", decided_at=2.0)
    ledger.quarantine(first)
    ledger.quarantine(second)
    assert ledger.dead_letters() == [second, first]
    assert ledger.dead_letters(limit=1) == [second]
    assert ledger.begin("p1", "w1", LONG) == first, "a poison mail never runs again"
