"""A waiting mail's outcome is stored compact (the ``DEFERRED`` meta) and read back whole."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mailer import outcomes as why
from mailer.outcomes import Outcome
from workers.outcomes import outcome_of

BOOKED = Outcome(
    status="deferred",
    mail_id="f780cc36-0571-4570-936d-682c0c99b12c",
    kind="default",
    reason=why.BOOKED,
    recipient="mailguard:{SOWqG9tIP1AncUkN}",
    tier="1/1h",
    wait=3599.997,
    due=1795806543.813,
    deferrals=1,
    message_id="<f780cc36-0571-4570-936d-682c0c99b12c@example.org>",
    decided_at=1795802943.8095078,
)


def test_the_waiting_form_leaves_out_the_fields_at_their_default() -> None:
    """Half the fields are empty while a mail waits: left out, the outcome is a third smaller;
    read back it is the same outcome."""
    compact = BOOKED.as_waiting_dict()
    assert None not in compact.values() and "attempts" not in compact
    assert {"status", "mail_id", "kind", "reason", "tier", "wait", "due"} <= set(compact)
    assert Outcome.from_dict(compact) == BOOKED
    full, small = (len(json.dumps(d)) for d in (BOOKED.as_dict(), compact))
    assert small < 0.7 * full, (small, full)


def test_a_value_that_is_not_the_default_is_kept() -> None:
    """A wait of 0 s is not an unknown wait (None): kept; the always-named fields stay."""
    outcome = Outcome(status="deferred", mail_id="m", kind="default", wait=0.0, attempts=0)
    assert outcome.as_waiting_dict() == {
        "status": "deferred",
        "mail_id": "m",
        "kind": "default",
        "wait": 0.0,
    }
    assert Outcome.from_dict(outcome.as_waiting_dict()) == outcome


def test_the_reading_side_gives_every_field_back() -> None:
    """What ``mailguard outcome``, the demo and ``lookup`` read (:func:`outcome_of`) is the
    whole outcome, as before the record was made compact."""
    assert outcome_of(BOOKED.as_waiting_dict()) == BOOKED.as_dict()
    assert outcome_of(BOOKED.as_dict()) == BOOKED.as_dict()


@pytest.mark.parametrize(
    "meta",
    [
        None,
        "text",
        {"status": "deferred"},  # no mail id: not an outcome, shown as it is
        {"status": "sent", "mail_id": "m", "kind": "default"},  # final: stored whole
        {"exc_type": "Ignore"},
    ],
)
def test_any_other_meta_is_returned_as_it_is(meta: Any) -> None:
    assert outcome_of(meta) == meta
