"""Every role behind Sentinel, and the master SIGKILLed while mails flow.

One Redis master, one replica and three sentinels (quorum 2, ``down-after-milliseconds`` 1000,
``failover-timeout`` 3000), all on loopback: broker (db 1), result backend (db 2), limiter,
ledger and schedule (db 0) each named ``redis+sentinel://h1:p1,h2:p2,h3:p3/mymaster/<db>``.
Two prefork workers (concurrency 2) and this process as the producer, an aiosmtpd server.

The failover test sends half the load (300 mails to 50 recipients), kills the master, sends
the other half (a publish that fails while no master is known is tried again, as a
producer's retry would), and audits from the SMTP server's log: every mail delivered once,
none over its recipient's policy (every sent mail's slot recounted: a booked mail's due, else
its admission, on the limiter's clock), none stuck, no worker dead. No timed assertion: the
recovery times are measured, and the arrivals recounted (windows 1 s shorter) and the slowest
admission to arrival printed: the policy is kept at admission, and a send the failover held
between its admission and the relay arrives that much later. The figures are printed
(``pytest -s``) and quoted in ``docs/howto/sentinel.md``.

The promise for a slot the old master booked and the new one forgot: none is ever used. A
booking (and a ledger claim or record) returns only once a replica holds it
(:mod:`mailer.replica_ack`); one no replica acknowledged is reported as the limiter being down
and the mail is deferred, never sent on it. ``test_a_booking_no_replica_took_sends_nothing``
tests that with the replica frozen.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery.result import AsyncResult

from devservers.celery_worker import CeleryWorker, client_app, start_all, stop_all, worker_env
from devservers.redis_servers import RedisSentinel, RedisServer
from devservers.smtp_server import SmtpTestServer
from mailer import Limiter, Policy
from mailer.errors import BackendUnavailable
from mailer.records.outbox import LANES, outbox_from_url
from mailer.settings import Settings
from tests.waiting import poll
from workers import tasks

TASK = "mailguard.send_mail"
POLICY = "1/1s, 3/6s"
RECIPIENTS = 50
PER_RECIPIENT = 6  # 300 mails: half before the kill, half after

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(150)]


@pytest.fixture
def deployment() -> Iterator[RedisSentinel]:
    master = RedisServer().start()
    sentinels = RedisSentinel(master, replicas=1, sentinels=3).start()
    yield sentinels
    sentinels.cleanup()
    master.cleanup()


def test_the_outboxs_later_writes_reach_the_master_and_its_replica(
    deployment: RedisSentinel,
) -> None:
    """The outbox's puts and receipts travel on a connection of their own, whose answers are
    read later: behind Sentinel that connection asks the sentinels for the master (it once
    went to localhost:6379, so a first message lost at a failover was never published again).
    Three puts and one receipt land on the master and reach its replica."""
    url = f"redis+sentinel://{deployment.hosts}/mymaster/0"
    outbox = outbox_from_url(url)
    for n in range(3):
        outbox.put_later(f"m{n}", LANES[0], b"payload")
    outbox.received_later("m0", LANES[0])
    outbox.settle()
    for server in (deployment.master, *deployment.replicas):
        client = redis.Redis(port=server.port)
        poll(lambda c=client: c.hlen(outbox.payloads_key) == 2, 5, "the puts to arrive")  # type: ignore[misc]
        assert client.hexists(outbox.payloads_key, "m1"), server.port
        client.close()
    outbox.close()


def test_a_booking_no_replica_took_sends_nothing(deployment: RedisSentinel) -> None:
    """With the replica frozen (SIGSTOP), a booking is refused as the limiter being down
    (``BackendUnavailable``) after the wait: the slot is never acted upon, so a failover that
    lost it cannot let a second mail into it. Thawed, bookings are acknowledged again."""
    url = f"redis+sentinel://{deployment.hosts}/mymaster/0"
    limiter = Limiter.from_url(url, Policy.parse("1/60s"), secret="s")
    assert limiter.acquire("ada@example.com").allowed
    replica = deployment.replicas[0].process
    assert replica is not None
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        with pytest.raises(BackendUnavailable, match="replica"):
            limiter.acquire("bob@example.com")
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    # The unacknowledged booking stayed on the master: bob's slot is held, never doubled.
    assert limiter.acquire("bob@example.com").refused
    assert limiter.acquire("cy@example.com").allowed
    limiter.close()


def test_a_publish_no_replica_took_is_an_error_for_the_caller(deployment: RedisSentinel) -> None:
    """With the replica frozen, ``apply_async`` on the Sentinel broker fails (not
    acknowledged: a failover could lose it) instead of answering for a message only the master
    holds; thawed, it is acknowledged and answered. The ledger answers the copy the master kept."""
    base = f"redis+sentinel://{deployment.hosts}/mymaster"
    app = client_app({"MAILGUARD_BROKER_URL": f"{base}/1", "MAILGUARD_RESULT_BACKEND": f"{base}/2"})
    replica = deployment.replicas[0].process
    assert replica is not None
    send_mail = app.tasks[TASK]
    try:
        send_mail.apply_async(args=["ada@example.com"], kwargs={"subject": "s", "body": "b"})
        os.kill(replica.pid, signal.SIGSTOP)
        try:
            with pytest.raises(Exception, match="replica"):
                send_mail.apply_async(
                    args=["bob@example.com"], kwargs={"subject": "s", "body": "b"}, retry=False
                )
        finally:
            os.kill(replica.pid, signal.SIGCONT)
        send_mail.apply_async(args=["cy@example.com"], kwargs={"subject": "s", "body": "b"})
    finally:
        app.close()


def publish(app: Any, mail_id: str, recipient: str, tries: list[float]) -> AsyncResult[Any]:
    """``send_mail.apply_async`` as a caller's process does, tried again every 0.2 s while it
    fails (no master known yet); the moment of each failure is appended to ``tries``."""
    while True:
        try:
            return app.tasks[TASK].apply_async(
                args=[recipient], kwargs={"subject": mail_id, "body": "f", "mail_id": mail_id}
            )
        except Exception:
            tries.append(time.monotonic())
            time.sleep(0.2)


def final(result: AsyncResult[Any]) -> Any:
    """The outcome dict of a settled result, else None (its state unreadable included)."""
    with contextlib.suppress(Exception):
        if result.state in ("SUCCESS", "FAILURE"):
            info = result.info
            return info.args[0] if isinstance(info, BaseException) and info.args else info
    return None


def unsettled(
    deployment: RedisSentinel, smtp: SmtpTestServer, results: dict[str, list[AsyncResult[Any]]]
) -> list[str]:
    """Each mail neither delivered nor final: its tasks' states and where the broker (the
    current master's db 1) keeps their messages, to say why."""
    copies = Counter(d.message["Subject"] for d in smtp.delivered)
    lines = []
    port = deployment.master_port()
    broker = redis.Redis(port=port or 0, db=1)
    ledger = redis.Redis(port=port or 0, db=0)
    try:
        lists = {k: broker.lrange(k, 0, -1) for k in broker.keys("*") if broker.type(k) == b"list"}
        unacked = b" ".join(broker.hvals("unacked"))
        for mail_id, rs in results.items():
            if copies[mail_id] or any(final(r) for r in rs):
                continue
            for r in rs:
                places = [
                    k.decode()
                    for k, items in lists.items()
                    if any(r.id.encode() in i for i in items)
                ]
                if r.id.encode() in unacked:
                    places.append("unacked")
                with contextlib.suppress(Exception):
                    places.append(f"state {r.state}")
                places.append(outbox_state(ledger, mail_id))
                lines.append(f"{mail_id} task {r.id}: {', '.join(places) or 'nowhere'}")
    finally:
        broker.close()
        ledger.close()
    return lines


def outbox_state(ledger: Any, mail_id: str) -> str:
    """Where the outbox (the current master's db 0) keeps ``mail_id``: its entry's lane and
    write time, a payload, a receipt's tombstone; and each lane's mark (epoch ms)."""
    found = []
    with contextlib.suppress(Exception):
        for key in ledger.scan_iter(match="*{outbox:*"):
            kind = ledger.type(key)
            name = key.decode()
            if kind == b"zset" and name.endswith(":received"):
                found.append(f"marks {ledger.zrange(key, 0, -1, withscores=True)}")
            elif kind == b"zset" and (at := ledger.zscore(key, mail_id)) is not None:
                found.append(f"{name.rsplit(':', 1)[-1] if ':at:' in name else name}={at:.0f}")
            elif kind == b"hash" and name.endswith(":payloads") and ledger.hexists(key, mail_id):
                found.append("payload")
    return "outbox: " + (" ".join(found) or "nothing")


def naming(log: str, stuck: list[str]) -> str:
    """The lines of a worker's log that name an unsettled mail or its task, or the outbox."""
    names = {word for line in stuck for word in line.split()[:3] if word != "task"}
    names = {n.rstrip(":") for n in names}
    return "\n".join(
        line[:300] for line in log.splitlines() if "outbox" in line or any(n in line for n in names)
    )


def over_admissions(times: dict[str, list[float]], policy: Policy, slack: float) -> int:
    """Windows (each shortened by ``slack`` s) in which a recipient's times exceed a tier."""
    over = 0
    for slots in times.values():
        slots.sort()
        for tier in policy.tiers:
            if tier.window <= slack:
                continue
            for i in range(len(slots) - tier.limit):
                if slots[i + tier.limit] - slots[i] < tier.window - slack - 1e-6:
                    over += 1
    return over


def test_the_master_killed_while_mails_flow(deployment: RedisSentinel) -> None:
    base = f"redis+sentinel://{deployment.hosts}/mymaster"
    smtp = SmtpTestServer().start()
    env = worker_env(
        f"{base}/0",
        smtp.url,
        MAILGUARD_BROKER_URL=f"{base}/1",
        MAILGUARD_RESULT_BACKEND=f"{base}/2",
        MAILGUARD_LIMITER_URL=f"{base}/0",
        MAILGUARD_POLICY=POLICY,
        MAILGUARD_MAX_COUNTDOWN="2s",
        MAILGUARD_VISIBILITY_TIMEOUT="8s",
        MAILGUARD_RESTORE_INTERVAL="500ms",
        MAILGUARD_CLAIM_LEASE="3s",
        MAILGUARD_SEND_RETRIES="8",
    )
    app = client_app(env)
    previous = tasks.use_settings(Settings.from_env(env))
    workers = start_all([CeleryWorker(env, name=f"w{n}") for n in (1, 2)])
    results: dict[str, list[AsyncResult[Any]]] = {}
    mails = [
        (f"fo-{r}-{n}", f"user{r}@example.com")
        for n in range(PER_RECIPIENT)
        for r in range(RECIPIENTS)
    ]
    tries: list[float] = []
    try:
        half = len(mails) // 2
        for mail_id, to in mails[:half]:
            results[mail_id] = [publish(app, mail_id, to, tries)]
        poll(lambda: len(smtp.delivered) >= 10, 30, "mails flowing before the kill")
        old = deployment.master_port()
        killed_at, killed_epoch = time.monotonic(), time.time()
        deployment.kill_master()
        for mail_id, to in mails[half:]:
            results[mail_id] = [publish(app, mail_id, to, tries)]
        published_after = time.monotonic() - killed_at
        poll(lambda: deployment.master_port() not in (None, old), 30, "a replica promoted")
        promoted_after = time.monotonic() - killed_at

        def settled() -> bool:
            copies = Counter(d.message["Subject"] for d in smtp.delivered)
            return all(copies[m] or any(final(r) for r in rs) for m, rs in results.items())

        deadline = time.monotonic() + 90
        while not settled() and time.monotonic() < deadline:
            time.sleep(0.2)
        stuck = unsettled(deployment, smtp, results)
        delivered = smtp.delivered
        copies = Counter(d.message["Subject"] for d in delivered)
        # Workers back: the first mail the server took once a replica was promoted.
        back = [d.received_at - killed_epoch for d in delivered]
        resumed = min((t for t in back if t >= promoted_after), default=float("nan"))
        dues: dict[str, list[float]] = {}
        arrivals: dict[str, list[float]] = {}
        for d in delivered:
            arrivals.setdefault(str(d.message["Subject"]).rsplit("-", 1)[0], []).append(
                d.received_at
            )
        unknown = 0
        lags: list[float] = []  # admission to the SMTP server's arrival, seconds
        received = {str(d.message["Subject"]): d.received_at for d in delivered}
        for mail_id, rs in results.items():
            outcome = next((o for r in rs if isinstance(o := final(r), dict)), None)
            if outcome is None:
                unknown += 1
            elif outcome.get("status") == "sent" and outcome.get("admitted_at") is not None:
                # The slot: a booked mail's due, else when the limiter admitted it at once.
                slot = float(
                    outcome["due"] if outcome.get("due") is not None else outcome["admitted_at"]
                )
                dues.setdefault(mail_id.rsplit("-", 1)[0], []).append(slot)
                if mail_id in received:
                    lags.append(received[mail_id] - float(outcome["admitted_at"]))
        policy = Policy.parse(POLICY)
        dead = [w.name for w in workers if w.process is not None and w.process.poll() is not None]
        figures = {
            "mails": len(mails),
            "delivered": len(copies),
            "duplicates": sum(n - 1 for n in copies.values() if n > 1),
            "lost": sum(1 for m in results if not copies[m]),
            "over (slots)": over_admissions(dues, policy, 0.0),
            "slots read": sum(len(v) for v in dues.values()),
            "over (arrivals, 1 s slack)": over_admissions(arrivals, policy, 1.0),
            "slowest admission to arrival, s": round(max(lags, default=0.0), 2),
            "outcomes unread": unknown,
            "worker deaths": len(dead),
            "promoted after s": round(promoted_after, 2),
            "producer's publishes done after s": round(published_after, 2),
            "failed publishes retried": len(tries),
            "first delivery after the promotion, s after the kill": round(resumed, 2),
        }
        print(f"sentinel failover: {figures}")
        assert not stuck, (
            f"{figures}\n"
            + "\n".join(stuck)
            + "".join(f"\n--- {w.name} on them:\n{naming(w.log(), stuck)}" for w in workers)
            + "".join(f"\n--- {w.name}:\n{w.log()[-4000:]}" for w in workers)
        )
        assert figures["duplicates"] == 0, figures
        assert figures["lost"] == 0, figures
        assert figures["over (slots)"] == 0, figures
        assert figures["slots read"] == len(mails) - unknown, figures
        # Arrivals: the policy is kept at admission; a send held between its admission and the
        # relay by the failover arrives that much later (figures printed, not a promise).
        assert not dead, "\n".join(w.log()[-3000:] for w in workers)
    finally:
        stop_all(workers, timeout=10)
        app.close()
        tasks.use_settings(previous)
        smtp.stop()
