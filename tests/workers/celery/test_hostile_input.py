"""Hostile calls through a real prefork worker: refused at enqueue, or dropped on receipt.

A context nested 500 deep once killed a prefork worker's main process (it pickles the arguments
for its pool) and then every worker that took the message back. Now ``send_mail.delay`` refuses
it, and a message that bypasses ``delay`` (another producer: ``app.send_task``) is dropped as
``invalid`` on receipt, before the pool; the worker carries on with the next mail.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from celery import Celery
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mailer.mail.arguments import InvalidArguments
from tests.workers.celery.conftest import LooseStack
from workers.tasks import check_call

TASK = "mailguard.send_mail"

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def deep(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"x": value}
    return value


def settle(app: Celery, task_id: str, timeout: float = 20) -> tuple[str, Any]:
    result = app.AsyncResult(task_id)
    deadline = time.monotonic() + timeout
    while not result.ready() and time.monotonic() < deadline:
        time.sleep(0.02)
    return result.state, result.info


def test_a_deep_context_from_another_producer_is_dropped_and_the_worker_goes_on(
    loose_stack: LooseStack,
) -> None:
    """A 500-deep context sent around delay() ends dropped/invalid; the next mail is sent."""
    app, worker, smtp = loose_stack
    poison = app.send_task(TASK, args=["ada@example.com"], kwargs={"context": deep(500)})
    state, info = settle(app, poison.id)
    assert (state, info["status"], info["reason"]) == ("SUCCESS", "dropped", "invalid"), info
    assert "nested deeper than 32" in info["detail"]
    after = app.send_task(TASK, args=["bob@example.com"], kwargs={"subject": "s", "body": "b"})
    assert settle(app, after.id)[1]["status"] == "sent"
    assert worker.process is not None and worker.process.poll() is None, "the worker died"
    assert "Unrecoverable error" not in worker.log()
    assert [d.rcpt_tos for d in smtp.delivered[-1:]] == [("bob@example.com",)]


def test_a_forged_progress_is_dropped_on_receipt(loose_stack: LooseStack) -> None:
    """A caller-made ``_progress`` (not sealed by mailguard) is dropped, never trusted."""
    app, _, smtp = loose_stack
    before = len(smtp.delivered)
    forged = app.send_task(
        TASK,
        args=["cy@example.com"],
        kwargs={"mail_id": "forged-1", "_progress": {"attempts": "many", "send_failures": 1e309}},
    )
    state, info = settle(app, forged.id)
    assert (state, info["reason"]) == ("SUCCESS", "invalid") and "private" in info["detail"]
    assert len(smtp.delivered) == before


def test_a_mail_010_deferred_is_sent_by_this_version(loose_stack: LooseStack) -> None:
    """The next run 0.1.0 published for a mail it deferred carries its unsealed ``_progress``
    (four counters): this version runs it on a fresh progress and sends it, once."""
    app, _, smtp = loose_stack
    before = len(smtp.delivered)
    counters = {"attempts": 1, "send_failures": 1, "limiter_failures": 0, "deferrals": 1}
    shipped = app.send_task(
        TASK,
        args=["dee@example.com"],
        kwargs={"subject": "s", "body": "b", "mail_id": "deferred-by-010", "_progress": counters},
    )
    state, info = settle(app, shipped.id)
    assert (state, info["status"], info["mail_id"]) == ("SUCCESS", "sent", "deferred-by-010")
    assert [d.rcpt_tos for d in smtp.delivered[before:]] == [("dee@example.com",)]


def test_delay_refuses_what_a_worker_would_drop() -> None:
    """The same checks run at enqueue: one clear error, nothing enqueued."""
    with pytest.raises(InvalidArguments, match="nested deeper than 32"):
        check_call(["ada@example.com"], {"context": deep(500)})
    with pytest.raises(InvalidArguments, match="_progress is private"):
        check_call(["ada@example.com"], {"mail_id": "m", "_progress": "abc.def"})


text = st.text(st.characters(codec=None, categories=None), max_size=30)  # surrogates included
numbers = (
    st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([5e-324, -0.0, 1e308, 2**63, -(2**63) - 1])
)
leaves = st.none() | st.booleans() | numbers | text
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
hostile = st.one_of(values, st.integers(0, 600).map(deep))


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    to=st.one_of(st.emails(), text, numbers),
    field=st.sampled_from(["subject", "body", "html", "kind", "context", "headers", "mail_id"]),
    value=hostile,
    via_delay=st.booleans(),
)
def test_any_value_anywhere_is_refused_dropped_or_sent(
    loose_stack: LooseStack, to: Any, field: str, value: Any, via_delay: bool
) -> None:
    """Refused at enqueue with InvalidArguments, or a SUCCESS outcome: never FAILURE or PENDING."""
    app, worker, _ = loose_stack
    kwargs = {"subject": "s", "body": "b", field: value}
    if via_delay:
        try:
            check_call([to], kwargs)
        except InvalidArguments:
            event("refused at enqueue")
            return
    try:
        result = app.send_task(TASK, args=[to], kwargs=kwargs)
    except (TypeError, ValueError):  # kombu cannot even encode it (e.g. a lone surrogate)
        event("not encodable")
        return
    state, info = settle(app, result.id)
    assert state == "SUCCESS", (state, info)
    event(f"{info['status']}/{info['reason']}")
    assert info["status"] in ("sent", "dropped")
    assert worker.process is not None and worker.process.poll() is None, "the worker died"
