"""Metrics and structured logs: the guard's recording on a fresh registry, JSON log lines, and a
real prefork worker serving the sum of its pool processes' metrics on MAILGUARD_METRICS_PORT.
"""

from __future__ import annotations

import json
import logging
import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest
from celery import Celery
from celery.result import AsyncResult
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.ports import free_port
from devservers.smtp_server import SmtpTestServer
from mailer import BackendUnavailable, Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import Finish, Guard, Later, MailRequest
from mailer.logs import JsonFormatter
from mailer.mail.kinds import Kind
from mailer.mail.transports import MemoryTransport
from mailer.metrics import NO_METRICS, Metrics, default_metrics
from mailer.outcomes import Outcome
from mailer.records.ledger import MemoryLedger
from mailer.settings import ALL_INTERFACES, Settings

TASK = "mailguard.send_mail"
ADA = "ada@example.com"


# --- the recording function and the guard's instrumentation, on a fresh registry ---


def make_guard(clock: ManualClock, registry: CollectorRegistry) -> tuple[Guard, MemoryLedger]:
    limiter = Limiter.from_url("memory://", Policy.parse("1/60s", name="recipient"), clock=clock)
    ledger = MemoryLedger(clock)
    kinds = Kinds.defaults().with_kind(Kind("now", subject="s", body="b", max_wait=0))
    guard = memory_guard(
        limiter,
        ledger,
        MemoryTransport(),
        kinds=kinds,
        clock=clock,
        metrics=Metrics(registry),
    )
    return guard, ledger


def count(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_record_counts_outcomes_by_label_and_lateness_of_deferred_sends() -> None:
    """One count per outcome under its labels; lateness only for a sent mail that was deferred."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    sent = Outcome("sent", "m1", "code", due=100.0, sent_at=100.2)
    late = Outcome("sent", "m2", "code", deferrals=2, due=100.0, sent_at=100.75)
    booked = Outcome("deferred", "m3", "code", reason="booked", tier="1/1m")
    unguarded = Outcome("sent", "m4", "code", detail="sent unguarded")
    for outcome in (sent, late, booked, booked, unguarded):
        metrics.record(outcome, "code")
    total = "mailguard_outcomes_total"
    labels = {"kind": "code", "status": "sent", "reason": "", "tier": ""}
    assert count(registry, total, **labels) == 2
    assert count(registry, total, **(labels | {"reason": "unguarded"})) == 1
    assert count(registry, total, kind="code", status="deferred", reason="booked", tier="1/1m") == 2
    assert count(registry, "mailguard_lateness_seconds_count", kind="code") == 1
    assert count(registry, "mailguard_lateness_seconds_sum", kind="code") == pytest.approx(0.75)
    assert count(registry, "mailguard_lateness_seconds_bucket", kind="code", le="0.5") == 0
    assert count(registry, "mailguard_lateness_seconds_bucket", kind="code", le="1.0") == 1


def test_guard_records_each_run_once_with_bounded_labels(clock: ManualClock) -> None:
    """Sent, booked then sent, dropped, an unknown kind, a repeated run: counted as such."""
    registry = CollectorRegistry()
    guard, _ = make_guard(clock, registry)
    assert isinstance(guard.process(MailRequest(ADA, "m1", "s", "b")), Finish)
    booked = guard.process(MailRequest(ADA, "m2", "s", "b"))
    assert isinstance(booked, Later)
    dropped = guard.process(MailRequest(ADA, "m3", kind="now"))
    assert isinstance(dropped, Finish) and dropped.outcome.reason == "rate_limited"
    guard.process(MailRequest(ADA, "m4", "s", "b", kind="a-caller's-typo"))
    clock.advance(60.25)
    woke = guard.process(MailRequest(ADA, "m2", "s", "b"), booked.progress)
    assert isinstance(woke, Finish) and woke.outcome.status == "sent"
    guard.process(MailRequest(ADA, "m1", "s", "b"))  # already sent: a repeated run

    total = "mailguard_outcomes_total"
    assert count(registry, total, kind="default", status="sent", reason="", tier="") == 2
    assert count(registry, total, kind="default", status="deferred", reason="booked", tier="1/1m")
    assert count(registry, total, kind="now", status="dropped", reason="rate_limited", tier="1/1m")
    assert count(registry, total, kind="unknown", status="dropped", reason="invalid", tier="") == 1
    assert sum(s.value for m in registry.collect() for s in m.samples if s.name == total) == 5
    assert count(registry, "mailguard_repeated_runs_total", kind="default") == 1
    assert count(registry, "mailguard_limiter_decision_seconds_count") == 4
    assert 0 < count(registry, "mailguard_limiter_decision_seconds_sum") < 0.5
    assert count(registry, "mailguard_lateness_seconds_sum", kind="default") == pytest.approx(0.25)
    exposed = str([s.labels for m in registry.collect() for s in m.samples])
    assert ADA not in exposed and "m1" not in exposed, "no address or mail id in a label"


def test_a_rebooked_mail_counts_its_lateness_against_its_first_slot(clock: ManualClock) -> None:
    """A mail booked 60 s ahead whose run comes back 10 s after its slot is re-booked (counted)
    and sent at once: lateness against its first slot is 10 s, against its last slot 0."""
    registry = CollectorRegistry()
    guard, _ = make_guard(clock, registry)
    guard.process(MailRequest(ADA, "m1", "s", "b"))
    booked = guard.process(MailRequest(ADA, "m2", "s", "b"))
    assert isinstance(booked, Later)
    clock.advance(70)
    sent = guard.process(MailRequest(ADA, "m2", "s", "b"), booked.progress)
    assert isinstance(sent, Finish) and sent.outcome.status == "sent"
    assert count(registry, "mailguard_rebookings_total", kind="default") == 1
    first = "mailguard_first_slot_lateness_seconds_sum"
    assert count(registry, first, kind="default") == pytest.approx(10)
    assert count(registry, "mailguard_lateness_seconds_sum", kind="default") == 0


def test_hops_towards_one_slot_count_one_deferral(clock: ManualClock) -> None:
    """A booking 60 s ahead with a 20 s max countdown hops twice: ``deferred`` counts once."""
    registry = CollectorRegistry()
    limiter = Limiter.from_url("memory://", Policy.parse("1/60s", name="recipient"), clock=clock)
    guard = memory_guard(
        limiter,
        MemoryLedger(clock),
        MemoryTransport(),
        clock=clock,
        metrics=Metrics(registry),
    )
    guard.process(MailRequest(ADA, "m1", "s", "b"))
    step = guard.process(MailRequest(ADA, "m2", "s", "b"))
    while isinstance(step, Later):
        clock.advance(min(step.wait, 20.0))  # a worker's countdown capped at 20 s
        step = guard.process(MailRequest(ADA, "m2", "s", "b"), step.progress)
    assert isinstance(step, Finish) and step.outcome.status == "sent"
    deferred = {"kind": "default", "status": "deferred", "reason": "booked", "tier": "1/1m"}
    assert count(registry, "mailguard_outcomes_total", **deferred) == 1
    assert count(registry, "mailguard_outcomes_total", **(deferred | {"tier": ""})) == 0


def test_queue_wait_is_counted_by_priority() -> None:
    """Queue waits land under the kind's priority; a negative wait (clock noise) counts 0."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.queue_wait(9, 0.02)
    metrics.queue_wait(5, 12.0)
    metrics.queue_wait(5, -0.5)
    wait = "mailguard_queue_wait_seconds"
    assert count(registry, f"{wait}_count", priority="9") == 1
    assert count(registry, f"{wait}_sum", priority="5") == pytest.approx(12.0)
    assert count(registry, f"{wait}_bucket", priority="5", le="0.01") == 1


def test_guard_counts_an_unavailable_ledger(clock: ManualClock) -> None:
    """A ledger that cannot be reached is counted (backend="ledger") and the mail deferred."""
    registry = CollectorRegistry()
    guard, ledger = make_guard(clock, registry)

    def down(*_: object, **__: object) -> None:
        raise BackendUnavailable("redis://ledger", backend="ledger")

    ledger.begin = down  # type: ignore[method-assign,assignment]
    step = guard.process(MailRequest(ADA, "m1", "s", "b"))
    assert isinstance(step, Later) and step.outcome.reason == "ledger_unavailable"
    assert count(registry, "mailguard_backend_unavailable_total", backend="ledger") == 1
    assert count(registry, "mailguard_limiter_decision_seconds_count") == 0


def test_no_metrics_records_nothing_and_the_default_is_shared(clock: ManualClock) -> None:
    """``NO_METRICS`` leaves every registry untouched; guards share one default ``Metrics``."""
    limiter = Limiter.from_url("memory://", Policy.parse("1/60s"), clock=clock)
    quiet = memory_guard(
        limiter, MemoryLedger(clock), MemoryTransport(), clock=clock, metrics=NO_METRICS
    )
    default_metrics()
    sent = {"kind": "default", "status": "sent", "reason": "", "tier": ""}
    before = count(REGISTRY, "mailguard_outcomes_total", **sent)
    assert isinstance(quiet.process(MailRequest(ADA, "m1", "s", "b")), Finish)
    assert count(REGISTRY, "mailguard_outcomes_total", **sent) == before
    assert (
        memory_guard(limiter, MemoryLedger(clock), MemoryTransport()).metrics is default_metrics()
    )


def test_json_formatter_writes_the_vetted_fields_only() -> None:
    """One JSON object: message, level, the guard's fields; an unlisted extra is left out."""
    record = logging.LogRecord(
        "mailguard", logging.INFO, __file__, 1, "mail %s sent", ("m1",), None
    )
    record.__dict__.update(
        mail_id="m1", recipient="mailguard:{abc}", kind="code", status="sent", reason=None
    )
    record.__dict__["to"] = ADA  # some other library's extra
    line = JsonFormatter().format(record)
    data = json.loads(line)
    assert data["message"] == "mail m1 sent" and data["level"] == "INFO"
    assert data["mail_id"] == "m1" and data["recipient"] == "mailguard:{abc}"
    assert (data["kind"], data["status"]) == ("code", "sent") and "reason" not in data
    assert ADA not in line and "\n" not in line


# --- a real worker: prefork, 2 processes ---


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    """``/metrics`` as {(sample name, labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def wait_state(result: AsyncResult, state: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while result.state != state and time.monotonic() < deadline:
        time.sleep(0.05)
    assert result.state == state


@pytest.fixture
def metrics_stack(
    redis_url: str, smtp_server: SmtpTestServer
) -> Iterator[tuple[Celery, CeleryWorker, int]]:
    """A prefork worker (2 processes) serving metrics on a free loopback port."""
    port = free_port()
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_METRICS_PORT=f"127.0.0.1:{port}",
        MAILGUARD_KIND_BURST_MAX_WAIT="8s",
        MAILGUARD_KIND_NOW_MAX_WAIT="0",
    )
    worker = CeleryWorker(env, concurrency=2).start()
    app = client_app(env)
    yield app, worker, port
    worker.stop()
    app.close()


def test_worker_serves_exact_counts_summed_over_its_pool(
    metrics_stack: tuple[Celery, CeleryWorker, int],
) -> None:
    """Sent, deferred then sent, dropped (rate limited, invalid, unknown kind), repeated: exact."""
    app, worker, port = metrics_stack
    mail = {"subject": "s", "body": "b"}
    first = app.send_task(TASK, args=[ADA], kwargs=mail | {"kind": "burst", "mail_id": "first"})
    assert first.get(timeout=15)["status"] == "sent"
    later = app.send_task(TASK, args=[ADA], kwargs=mail | {"kind": "burst"})
    wait_state(later, "DEFERRED")
    dropped = app.send_task(TASK, args=[ADA], kwargs=mail | {"kind": "now"})
    assert dropped.get(timeout=15)["reason"] == "rate_limited"
    invalid = app.send_task(TASK, args=["not-an-address"], kwargs=mail)
    unknown = app.send_task(TASK, args=[ADA], kwargs=mail | {"kind": "no_such_kind"})
    again = app.send_task(TASK, args=[ADA], kwargs=mail | {"kind": "burst", "mail_id": "first"})
    for result in (invalid, unknown, again):
        result.get(timeout=15)
    outcome = later.get(timeout=15)
    assert outcome["status"] == "sent" and outcome["deferrals"] == 1

    samples = scrape(port)
    outcomes = {k: v for k, v in samples.items() if k[0] == "mailguard_outcomes_total"}
    expected = {
        ("burst", "sent", "", ""): 2,
        ("burst", "deferred", "booked", "1/1s"): 1,
        ("now", "dropped", "rate_limited", "1/1s"): 1,
        # an unknown kind is dropped on receipt, before the pool; a bad address by the guard
        ("unknown", "dropped", "invalid", ""): 1,
        ("default", "dropped", "invalid", ""): 1,
    }
    got = {
        tuple(dict(labels)[k] for k in ("kind", "status", "reason", "tier")): v
        for (_, labels), v in outcomes.items()
    }
    assert got == expected
    assert value(samples, "mailguard_repeated_runs_total", kind="burst") == 1
    assert value(samples, "mailguard_limiter_decision_seconds_count") == 4  # the booked one twice
    assert value(samples, "mailguard_lateness_seconds_count", kind="burst") == 1
    lateness = value(samples, "mailguard_lateness_seconds_sum", kind="burst")
    assert lateness == pytest.approx(outcome["sent_at"] - outcome["due"], abs=1e-6)
    assert abs(lateness) <= 0.5
    assert not any(k[0] == "mailguard_backend_unavailable_total" for k in samples)
    exposed = str([labels for _name, labels in samples])
    assert "ada" not in exposed.lower() and "first" not in exposed, "no address or mail id"
    assert len(worker.children()) == 2


def test_worker_refuses_to_start_on_a_taken_metrics_port(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """A metrics port already in use stops the worker at start with a line naming the variable."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = worker_env(redis_url, smtp_server.url, MAILGUARD_METRICS_PORT=f"127.0.0.1:{port}")
        with pytest.raises(RuntimeError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            CeleryWorker(env).start(timeout=20)


def test_worker_json_logs_carry_mail_id_and_recipient_hash_never_the_address(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """LOG_FORMAT=json: logged lines are JSON; the guard's carry their fields; no address."""
    env = worker_env(redis_url, smtp_server.url, MAILGUARD_LOG_FORMAT="json")
    worker = CeleryWorker(env, concurrency=2).start()
    app = client_app(env)
    try:
        sent = app.send_task(TASK, args=["Ada@Example.com"], kwargs={"subject": "s", "body": "b"})
        outcome = sent.get(timeout=15)
        bad = app.send_task(TASK, args=["Ada@Example.com"], kwargs={"kind": "no_such_kind"})
        bad.get(timeout=15)
        time.sleep(0.3)  # the "succeeded" lines follow the results
    finally:
        worker.stop()
        app.close()
    log = worker.log()
    _banner, _, logged = log.partition("[tasks]")  # Celery prints its banner as plain text
    records = [json.loads(line) for line in logged.splitlines()[1:] if line.startswith("{")]
    plain = [line for line in logged.splitlines()[1:] if line and not line.startswith("{")]
    # printed, not logged: the task list and the shutdown notice
    assert all(line.startswith(("  . ", "worker: Warm shutdown")) for line in plain), plain
    ours = {r["mail_id"]: r for r in records if r["logger"] == "mailguard"}
    assert ours[sent.id]["recipient"] == outcome["recipient"]
    assert outcome["recipient"].startswith("mailguard:")
    assert ours[sent.id]["status"] == "sent" and ours[bad.id]["reason"] == "invalid"
    assert any(r.get("task_id") == sent.id and "succeeded" in r["message"] for r in records)
    assert "ada@example.com" not in log.lower(), "no address in the worker's log"


def test_metrics_and_log_settings_are_read_and_checked() -> None:
    """A port or host:port turns metrics on; a bad port or log format names its variable."""
    assert Settings.from_env({}).metrics_port is None
    assert Settings.from_env({}).log_format == "text"
    plain = Settings.from_env({"MAILGUARD_METRICS_PORT": "9808", "MAILGUARD_LOG_FORMAT": "json"})
    assert (plain.metrics_host, plain.metrics_port, plain.log_format) == (
        ALL_INTERFACES,
        9808,
        "json",
    )
    local = Settings.from_env({"MAILGUARD_METRICS_PORT": "127.0.0.1:9100"})
    assert (local.metrics_host, local.metrics_port) == ("127.0.0.1", 9100)
    for bad in ("metrics", "70000", "host:"):
        with pytest.raises(ValueError, match=r"metrics port|METRICS_PORT"):
            Settings.from_env({"MAILGUARD_METRICS_PORT": bad})
    with pytest.raises(ValueError, match="MAILGUARD_LOG_FORMAT must be text or json"):
        Settings.from_env({"MAILGUARD_LOG_FORMAT": "xml"})
