"""Task events of a real worker (``-E``): a booked mail shows as RETRY, not STARTED.

Flower and ``celery events`` build a task's state from the worker's events
(:class:`celery.events.state.State`, which Flower uses too); the test feeds it the events a
real worker sent while one mail was sent and a second one to the same recipient was booked.
"""

from __future__ import annotations

import threading
import time

import pytest
from celery.events.state import State

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll


@pytest.mark.parametrize(("park_after", "said"), [("30s", "deferred until"), ("1s", "parked: ")])
def test_a_booked_mail_is_shown_as_retry_with_its_slot(
    redis_url: str, smtp_server: SmtpTestServer, park_after: str, said: str
) -> None:
    """Under ``1/2s`` one of two mails to one recipient is booked: the worker sends
    ``task-retried`` for it (RETRY, with the slot and tier in its text) and, at its slot,
    ``task-succeeded``; the result backend still says DEFERRED while it waits. The same for a
    booked mail held as a countdown and for one parked (``PARK_AFTER`` 1 s)."""
    env = worker_env(
        redis_url, smtp_server.url, MAILGUARD_POLICY="1/2s", MAILGUARD_PARK_AFTER=park_after
    )
    app = client_app(env)
    state = State()
    seen: list[dict[str, object]] = []
    retry_states: list[str] = []
    stop = threading.Event()

    def listen() -> None:
        with app.connection_for_read() as conn:
            receiver = app.events.Receiver(conn, handlers={"*": on_event})
            while not stop.is_set():
                try:
                    receiver.capture(limit=None, timeout=0.5, wakeup=False)
                except TimeoutError:
                    continue

    def on_event(event: dict[str, object]) -> None:
        state.event(event)  # first: the test reads the state once it sees the event
        if event["type"] == "task-retried":
            # What Flower shows when the retry arrives (a countdown's copy is received again
            # right after, so the state moves on to RECEIVED with its eta).
            retry_states.append(state.tasks[str(event["uuid"])].state)
        seen.append(event)

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    time.sleep(0.5)  # the receiver's queue is bound before the worker sends
    worker = CeleryWorker(env, events=True).start()
    try:
        mails = [
            app.send_task("mailguard.send_mail", args=["ada@example.com", subject, "x"])
            for subject in ("one", "two")
        ]
        poll(lambda: any(m.state == "DEFERRED" for m in mails), 10, "one mail booked")
        booked = next(m for m in mails if m.state == "DEFERRED")
        poll(
            lambda: any(e["type"] == "task-retried" for e in seen),
            10,
            "a task-retried event",
        )
        assert retry_states[0] == "RETRY"
        retried = next(e for e in seen if e["type"] == "task-retried")
        assert retried["uuid"] == booked.id
        assert said in str(retried["exception"]) and "1/2s" in str(retried["exception"])
        # The address, not its local part alone: a task id's hex may spell "ada".
        assert "ada@example.com" not in str(retried).lower()
        poll(booked.ready, 10, "the booked mail sent")
        poll(lambda: state.tasks[booked.id].state == "SUCCESS", 10, "task-succeeded")
        assert [m.get(timeout=5)["status"] for m in mails] == ["sent", "sent"]
    finally:
        stop.set()
        worker.stop()
        listener.join(timeout=5)
        app.close()
