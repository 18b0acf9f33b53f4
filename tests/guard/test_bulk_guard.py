"""The bulk kinds' gates in the guard, in this process with the memory transport: a paused
sender's newsletter waits (deferred / reputation) from the next mail on while its login codes
go, the pause lifts when the rate falls back, an SMTP hard bounce counts against the sender;
and on a real Redis the reputation costs one Redis command per mail sent, no more."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from mailer.factory import build_guard
from mailer.guard import Finish, Guard, Later, MailRequest
from mailer.mail.transports.memory import MemoryTransport
from mailer.metrics import NO_METRICS
from mailer.records.reputation.keyed import mark_of
from mailer.settings import Settings
from tests.mail.transports.postmark_server import PostmarkStub
from tests.round_trips import round_trips

NEWS = "news@example.org"
_ids = itertools.count()


def _env(**extra: str) -> dict[str, str]:
    return {
        "MAILGUARD_SECRET": "test-secret",
        "MAILGUARD_SENDER": f"News <{NEWS}>",
        "MAILGUARD_POLICY": "1000/1s",
        "MAILGUARD_SMTP_URL": "memory://",
        "MAILGUARD_KIND_NEWSLETTER_UNSUBSCRIBE": "1",
        "MAILGUARD_UNSUBSCRIBE_URL": "https://example.org/unsubscribe",
        "MAILGUARD_REPUTATION": "complaint 10%, bounce 20%",
        "MAILGUARD_REPUTATION_MIN": "5",
        **extra,
    }


def _run(guard: Guard, kind: str, to: str | None = None) -> Any:
    n = next(_ids)
    to = to or f"r{n}@example.com"
    request = MailRequest(to=to, mail_id=f"m{n}", kind=kind, subject="s", body="b")
    return guard.process(request)


def test_a_paused_sender_defers_its_newsletter_and_sends_its_codes() -> None:
    """Five newsletters sent, a complaint for one: the next newsletter is deferred (reason
    reputation, looked at again in 5 min), a login code still goes; codes sent lower the rate
    under 10 % and the next newsletter goes."""
    guard = build_guard(Settings.from_env(_env()), metrics=NO_METRICS)
    assert guard.reputation is not None
    sent = [_run(guard, "newsletter") for _ in range(5)]
    assert all(isinstance(s, Finish) and s.outcome.status == "sent" for s in sent)
    guard.reputation.count_event("complained", sent[0].outcome.message_id)
    paused = _run(guard, "newsletter")
    assert isinstance(paused, Later) and paused.outcome.reason == "reputation"
    assert paused.wait == 300.0 and paused.outcome.status == "deferred"
    assert "complaint rate 20% >= 10%" in str(paused.outcome.detail)
    for _ in range(5):  # 1 complaint in 10 mails: still 10 %
        assert _run(guard, "code").outcome.status == "sent"
    assert isinstance(_run(guard, "newsletter"), Later)
    assert _run(guard, "code").outcome.status == "sent"  # 1 in 11: under 10 %
    assert _run(guard, "newsletter").outcome.status == "sent"


def test_an_smtp_hard_bounce_counts_against_the_sender() -> None:
    guard = build_guard(Settings.from_env(_env()), metrics=NO_METRICS)
    assert isinstance(guard.transport, MemoryTransport) and guard.reputation is not None
    guard.transport.fail_next(permanent=True, code=550, reply="5.1.1 user unknown")
    failed = _run(guard, "code")
    assert failed.outcome.status == "failed"
    standing = guard.reputation.check(NEWS)
    assert (standing.sent, standing.bounced) == (1, 1)


def _commands_of(redis_url: str, run: Callable[[], object]) -> list[str]:
    """The commands clients sent to Redis while ``run()`` ran (``MONITOR``; not the commands
    scripts call inside)."""
    seen: list[str] = []
    ready = threading.Event()

    def watch() -> None:
        with redis.Redis.from_url(redis_url).monitor() as monitor:
            ready.set()
            for command in monitor.listen():
                if command["command"] == "ECHO end-of-run":
                    return
                if command["client_type"] != "lua":
                    seen.append(command["command"].split(" ", 1)[0].upper())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    ready.wait(10)
    redis.Redis.from_url(redis_url).echo("start")  # the monitor is attached once this is seen
    run()
    redis.Redis.from_url(redis_url).echo("end-of-run")
    watcher.join(10)
    return seen[seen.index("ECHO") + 1 :] if "ECHO" in seen else seen


@pytest.mark.parametrize("kind", ["newsletter", "code"])
def test_the_reputation_costs_one_redis_command_per_mail_sent_in_no_more_round_trips(
    redis_url: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same mail through two guards on one Redis, the reputation off then on: the count's
    ``EVALSHA`` rides on the ledger's record (the same round trip), which it takes as one
    script call (``record.lua``'s ``EVALSHA`` where the reputation off records with ``SET``
    and ``DEL``); the pause is read in the gates' one ``MGET``. Each guard sends one mail
    first."""
    used, trips = [], []
    for reputation in ("off", "complaint 10%"):
        env = _env(MAILGUARD_LIMITER_URL=redis_url, MAILGUARD_REPUTATION=reputation)
        guard = build_guard(Settings.from_env(env), metrics=NO_METRICS)
        assert _run(guard, kind).outcome.status == "sent"
        used.append(_commands_of(redis_url, lambda: _run(guard, kind)))  # noqa: B023 - now
        trips.append(round_trips(monkeypatch, lambda: _run(guard, kind))[0])  # noqa: B023
    off, on = used
    assert off.count("SET") == off.count("DEL") == 1, used  # the record, off
    plain = [name for name in off if name not in {"SET", "DEL"}]
    assert sorted(on) == sorted([*plain, "EVALSHA", "EVALSHA"]), used
    assert on.count("MGET") <= 1, used
    assert trips[0] == trips[1], trips
    standing = guard.reputation.check(NEWS)  # type: ignore[union-attr]
    assert standing.sent == 3, "every mail the guard sent is counted"


def test_a_bulk_mail_to_several_goes_without_the_unsubscribed() -> None:
    """To Ada and Bob, Ada unsubscribed: the mail goes to Bob alone, with Bob's token; to Ada
    alone it is dropped / unsubscribed. Another sender's newsletter still reaches Ada."""
    guard = build_guard(Settings.from_env(_env()), metrics=NO_METRICS)
    assert guard.unsubscribe is not None and isinstance(guard.transport, MemoryTransport)
    suppressions = guard.unsubscribe.suppressions
    guard.unsubscribe.suppressions.unsubscribe(suppressions.hash_of("ada@example.com"), NEWS)
    both = guard.process(
        MailRequest(
            to=["ada@example.com", "bob@example.com"], mail_id="both", kind="newsletter",
            subject="s", body="b",
        )
    )  # fmt: skip
    assert both.outcome.status == "sent"
    [message] = guard.transport.sent
    assert message["To"] == "bob@example.com"
    token = str(message["List-Unsubscribe"]).strip("<>").rsplit("/", 1)[1]
    claims = guard.unsubscribe.signer.verify(token)
    assert claims.recipient == suppressions.hash_of("bob@example.com")
    alone = _run(guard, "newsletter", "ada@example.com")
    assert (alone.outcome.status, alone.outcome.reason) == ("dropped", "unsubscribed")
    other = MailRequest(
        to="ada@example.com", mail_id="other", kind="newsletter", subject="s", body="b",
        from_email="Shop <shop@example.org>",
    )  # fmt: skip
    assert guard.process(other).outcome.status == "sent"


def test_a_complaint_named_by_the_providers_id_counts_against_the_mails_sender(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sent through Postmark's API (a stand-in on 127.0.0.1), a newsletter is marked by the id
    Postmark gave it: a complaint webhook naming that id pauses its sender's bulk kinds."""
    with PostmarkStub("token") as stub:
        monkeypatch.setenv("ANYMAIL_POSTMARK_SERVER_TOKEN", "token")
        monkeypatch.setenv("ANYMAIL_POSTMARK_API_URL", stub.url)
        env = _env(
            MAILGUARD_TRANSPORT="anymail",
            MAILGUARD_ANYMAIL_ESP="postmark",
            MAILGUARD_REPUTATION_MIN="1",
        )
        guard = build_guard(Settings.from_env(env), metrics=NO_METRICS)
        assert guard.reputation is not None
        sent = _run(guard, "newsletter")
        assert isinstance(sent, Finish) and sent.outcome.status == "sent", sent
        assert sent.outcome.provider_message_id == stub.sent[0]
        marked = guard.reputation.store.attribute(
            mark_of(stub.sent[0]), guard.reputation._clock(), guard.reputation.limits
        )
        assert marked is not None and marked[1] == "newsletter"
        guard.reputation.count_event("complained", stub.sent[0])
        assert (guard.reputation.check(NEWS).complained, guard.reputation.check(NEWS).sent) == (
            1,
            1,
        )
        assert isinstance(_run(guard, "newsletter"), Later)
