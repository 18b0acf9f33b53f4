"""A waiting mail's outcome is stored compact (the ``DEFERRED`` record: Celery's status and the
outcome less what the record's id and state say) and read back whole."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from mailer import outcomes as why
from mailer.outcomes import Outcome
from workers.waiting.outcomes import outcome_of, read_state, store_waiting

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


TASK_ID = BOOKED.mail_id
#: Celery's Redis result backend, storing a state from this process, calls redis-py's setex.
SETEX = "ignore:Call to deprecated setex:DeprecationWarning"
#: What a reader gives back: everything but the Message-ID and the recipient key, which the
#: record leaves out (the schedule's entry holds the mail: ``mailguard outcome`` names it), and
#: the decision's time as ``due - wait`` (the limiter's clock), to the millisecond.
READ_BACK = BOOKED.but(message_id=None, recipient=None, decided_at=1795802943.816)


def test_the_waiting_form_leaves_out_what_the_record_already_says() -> None:
    """Half the fields are empty while a mail waits, and the status, mail id (the task id),
    kind (``default``) and first deferral are said by the record's state and key, the
    decision's time by ``due - wait``, the recipient by the schedule's entry: left out, the
    outcome is less than a fifth; read back it is the same outcome but for the recipient (the
    Message-ID is its final outcome's, the decision's time the limiter's, to the ms)."""
    compact = BOOKED.as_waiting_dict(TASK_ID)
    assert compact == {
        "reason": "booked",
        "tier": "1/1h",
        "wait": 3599.997,
        "due": 1795806543.813,
    }
    assert Outcome.from_waiting_dict(compact, TASK_ID) == READ_BACK
    full, small = (len(json.dumps(d)) for d in (BOOKED.as_dict(), compact))
    assert small < 0.2 * full, (small, full)
    record = json.dumps({"status": "DEFERRED", "result": compact}, separators=(",", ":"))
    assert len(record) <= 108, "in Redis's 112-byte allocation (3 B of header and a NUL)"


def test_what_the_waiting_form_cannot_imply_is_kept() -> None:
    """A decision's time away from ``due - wait`` is kept as it is, and read back as stored."""
    held = BOOKED.but(reason=why.HELD, decided_at=BOOKED.decided_at - 5, message_id=None)
    compact = held.as_waiting_dict(TASK_ID)
    assert compact["reason"] == "held" and "recipient" not in compact
    assert compact["decided_at"] == round(BOOKED.decided_at - 5, 3)
    back = Outcome.from_waiting_dict(compact, TASK_ID)
    assert back == held.but(decided_at=compact["decided_at"], recipient=None)


def test_a_compact_form_with_more_fields_reads_the_same() -> None:
    """A compact record that keeps fields it could leave out (the decision's time, the
    recipient) reads back as it was written."""
    previous = {
        "reason": "booked",
        "recipient": BOOKED.recipient,
        "tier": "1/1h",
        "wait": 3599.997,
        "due": 1795806543.813,
        "decided_at": 1795802943.81,
    }
    back = Outcome.from_waiting_dict(previous, TASK_ID)
    assert back == BOOKED.but(message_id=None, decided_at=1795802943.81)


def test_a_value_that_is_not_implied_is_kept() -> None:
    """A wait of 0 s is not an unknown wait (None): kept; a caller's own mail id, a kind other
    than ``default`` and a deferral count other than 1 (0: a caller's eta parked) are kept."""
    outcome = Outcome(status="deferred", mail_id="m", kind="bulk", wait=0.0, attempts=0)
    assert outcome.as_waiting_dict("task-1") == {
        "mail_id": "m",
        "kind": "bulk",
        "wait": 0.0,
        "deferrals": 0,
    }
    assert Outcome.from_waiting_dict(outcome.as_waiting_dict("task-1"), "task-1") == outcome
    assert outcome.as_waiting_dict()["mail_id"] == "m", "without a task id the mail id stays"


def test_the_reading_side_gives_every_field_back() -> None:
    """What ``mailguard outcome``, the demo and ``lookup`` read (:func:`outcome_of`, given the
    state and the task id) is the whole outcome; a record stored whole (status, mail id and
    kind in it, as 0.1.0 stored it), with or without the fields at their default, reads the
    same."""
    compact = BOOKED.as_waiting_dict(TASK_ID)
    assert outcome_of(compact, "DEFERRED", TASK_ID) == READ_BACK.as_dict()
    previous = BOOKED.but(message_id=None, deferrals=0).as_dict()
    previous = {k: v for k, v in previous.items() if v is not None and v != 0}
    assert "deferrals" not in previous, "a count of 0 left out"
    was = BOOKED.but(message_id=None, deferrals=0).as_dict()
    assert outcome_of(previous, "DEFERRED", TASK_ID) == was
    assert outcome_of(previous) == was
    assert outcome_of(BOOKED.as_dict()) == BOOKED.as_dict()
    sent = BOOKED.but(status="sent").as_dict()
    assert outcome_of(sent, "DEFERRED", TASK_ID) == sent, "a final outcome read in a race"


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


@pytest.fixture
def results_app(redis_url: str) -> Iterator[Celery]:
    """A Celery app whose result backend is the test's Redis (db 0), as mailguard's app sets
    it (JSON results); no worker."""
    app = Celery("waiting-record", broker="memory://", backend=redis_url, set_as_current=False)
    app.conf.update(result_serializer="json", result_extended=True, result_expires=3600)
    yield app
    app.close()


@pytest.mark.filterwarnings(SETEX)
def test_the_record_holds_celerys_two_keys_and_the_compact_outcome(
    results_app: Celery, redis_url: str
) -> None:
    """The stored record is ``status`` and ``result`` alone, JSON without spaces (no empty
    traceback, children, date_done, no task id again, none of ``result_extended``'s fields),
    under Celery's key with its TTL; ``AsyncResult`` reads it (state, reason, tier, wait, due)
    and :func:`read_state` gives the outcome whole."""
    store_waiting(results_app.backend, TASK_ID, BOOKED)
    client = redis.Redis.from_url(redis_url)
    key = f"celery-task-meta-{TASK_ID}"
    raw = client.get(key)
    ttl = client.ttl(key)
    client.close()
    assert raw is not None and 0 < ttl <= 3600
    assert json.loads(raw) == {"status": "DEFERRED", "result": BOOKED.as_waiting_dict(TASK_ID)}
    assert b" " not in raw and len(raw) < 140, raw
    result = results_app.AsyncResult(TASK_ID)
    assert result.state == "DEFERRED"
    info = result.info
    assert (info["reason"], info["tier"], info["due"], info["wait"]) == (
        "booked",
        "1/1h",
        BOOKED.due,
        BOOKED.wait,
    )
    assert result.traceback is None and result.children is None and result.date_done is None
    assert read_state(results_app, TASK_ID) == ("DEFERRED", READ_BACK.as_dict())


@pytest.mark.filterwarnings(SETEX)
def test_a_stored_success_is_not_overwritten(results_app: Celery) -> None:
    """As Celery's ``store_result`` does: a run that already ended the mail keeps its outcome
    (a stale DEFERRED written after it is dropped)."""
    sent = BOOKED.but(status="sent").as_dict()
    results_app.backend.store_result(TASK_ID, sent, "SUCCESS")
    store_waiting(results_app.backend, TASK_ID, BOOKED)
    assert read_state(results_app, TASK_ID) == ("SUCCESS", sent)


@pytest.mark.filterwarnings(SETEX)
@pytest.mark.parametrize("backend", ["cache+memory://", "redis-pickle"])
def test_other_backends_and_serializers_read_the_same(backend: str, redis_url: str) -> None:
    """A key-value backend other than Redis (the in-process cache) and a serializer other than
    JSON (Celery's own encoding) store the same record and read it back whole."""
    url = redis_url if backend == "redis-pickle" else backend
    app = Celery("waiting-other", broker="memory://", backend=url, set_as_current=False)
    if backend == "redis-pickle":
        app.conf.update(result_serializer="pickle", result_accept_content=["pickle", "json"])
    try:
        store_waiting(app.backend, TASK_ID, BOOKED)
        assert read_state(app, TASK_ID) == ("DEFERRED", READ_BACK.as_dict())
    finally:
        app.close()


@pytest.mark.filterwarnings(SETEX)
def test_storing_costs_the_commands_update_state_did(results_app: Celery, redis_url: str) -> None:
    """The same Redis commands as Celery's ``store_result`` for the same state (a ``GET`` of
    the record, then ``SETEX`` and ``PUBLISH`` in one transaction; a new connection's
    handshake aside): only fewer bytes."""
    client = redis.Redis.from_url(redis_url)

    def commands() -> dict[str, int]:
        stats = client.info("commandstats")
        client.config_resetstat()
        return {
            name.removeprefix("cmdstat_"): int(value["calls"])
            for name, value in stats.items()
            if name.split("|")[0] not in ("cmdstat_info", "cmdstat_config", "cmdstat_hello")
            and not name.startswith("cmdstat_client")
        }

    try:
        commands()
        store_waiting(results_app.backend, TASK_ID, BOOKED)
        ours = commands()
        results_app.backend.store_result(TASK_ID, BOOKED.as_dict(), "DEFERRED")
        assert ours == commands() == {"get": 1, "multi": 1, "setex": 1, "publish": 1, "exec": 1}
    finally:
        client.close()
