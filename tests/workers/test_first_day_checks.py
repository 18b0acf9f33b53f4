"""Every check at the earliest point: a bad call is refused by ``send_mail.delay``, a bad setting
by the worker's start, a shared limiter without the workers' secret by ``from_url``; each with
one line naming the argument or variable and the accepted form."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from mailer import Limiter, Policy
from mailer.aio import AsyncLimiter
from mailer.mail.arguments import InvalidArguments
from mailer.settings import Settings
from workers.run.call import check_call

ROOT = Path(__file__).resolve().parents[2]
POLICY = Policy.parse("1/60s, 5/1h", name="recipient")

#: Calls made with ``send_mail.delay`` in a process whose broker is the suite's Redis: each
#: prints the exception's class and message, or ``enqueued`` when the call was accepted.
DELAY_SCRIPT = """
import json, sys
from workers.tasks import send_mail
calls = json.loads(sys.argv[1])
answers = []
for args, kwargs in calls:
    try:
        send_mail.delay(*args, **kwargs)
        answers.append(["enqueued", ""])
    except Exception as exc:
        answers.append([type(exc).__name__, str(exc)])
print(json.dumps(answers))
"""


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}


class Delay:
    """``send_mail.delay`` in a fresh process on the suite's Redis broker and a queue of its own
    (no worker reads it), with a ``welcome`` kind from ``MAILGUARD_KIND_*``."""

    def __init__(self, redis_url: str) -> None:
        self.queue = f"first-day-{uuid.uuid4().hex[:8]}"
        self.env = _clean_env() | {
            "PYTHONPATH": str(ROOT),
            "MAILGUARD_BROKER_URL": redis_url,
            "MAILGUARD_RESULT_BACKEND": redis_url,
            "MAILGUARD_SECRET": "first-day",
            "MAILGUARD_QUEUE": self.queue,
            "MAILGUARD_KIND_WELCOME_SUBJECT": "Welcome {{ name }}",
            "MAILGUARD_KIND_WELCOME_BODY": "Hello {{ name }}, your plan is {{ plan }}.",
        }

    def __call__(self, *calls: tuple[list[Any], dict[str, Any]]) -> list[tuple[str, str]]:
        """``(exception class, message)`` for each call, or ``("enqueued", "")``."""
        done = subprocess.run(
            [sys.executable, "-c", DELAY_SCRIPT, json.dumps(calls)],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        answers = json.loads(done.stdout.strip().splitlines()[-1])
        return [(str(name), str(message)) for name, message in answers]


@pytest.fixture
def delay(redis_url: str) -> Delay:
    """A :class:`Delay` on the suite's Redis."""
    return Delay(redis_url)


def test_delay_refuses_a_bad_address_positional_or_in_a_list_the_same_way(
    delay: Delay, redis_url: str
) -> None:
    """``delay("bob@")`` and ``delay(to=["bob@"])`` raise the same one line at delay, naming
    ``to`` and the accepted form, never the address; nothing reaches the queue."""
    answers = delay(
        (["bob@"], {"subject": "s", "body": "b"}),
        ([], {"to": ["bob@"], "subject": "s", "body": "b"}),
        (["bob@example.com"], {"subject": "s", "body": "b"}),
    )
    (kind1, positional), (kind2, listed), accepted = answers
    assert kind1 == kind2 == "InvalidArguments"
    assert positional.startswith("send_mail: to: ") and listed.startswith("send_mail: to[0]: ")
    assert positional.split(": ", 2)[2] == listed.split(": ", 2)[2], (positional, listed)
    assert "an address such as ada@example.com" in positional
    assert "bob" not in positional and "\n" not in positional
    assert accepted == ("enqueued", ""), "a valid call is enqueued"
    client = redis.Redis.from_url(redis_url)
    # kombu keeps one list a priority step: the queue's name, or its name and the step
    queued = sum(client.llen(key) for key in client.scan_iter(match=f"{delay.queue}*"))
    assert queued == 1, "only the valid call reached the broker"


def test_delay_refuses_an_unknown_kind_with_the_closest_known_one(delay: Delay) -> None:
    """An unknown kind is refused at delay: a near miss gets "did you mean", any other the list
    of the process's kinds (the built-ins and MAILGUARD_KIND_*)."""
    near, far = delay(
        (["ada@example.com"], {"kind": "welcom", "context": {"name": "Ada", "plan": "pro"}}),
        (["ada@example.com"], {"kind": "spam", "subject": "s", "body": "b"}),
    )
    assert near == (
        "InvalidArguments",
        "send_mail: unknown kind 'welcom'; did you mean 'welcome'? "
        "known: code, default, notice, welcome",
    )
    assert far == (
        "InvalidArguments",
        "send_mail: unknown kind 'spam'; known: code, default, notice, welcome",
    )


def test_delay_refuses_a_missing_template_variable(delay: Delay) -> None:
    """A variable the kind's templates need, missing from ``context``, is refused at delay
    (the templates are not rendered: their variables are read once and cached); a text the kind
    has no template for must be given; a call that gives everything is enqueued."""
    missing, none, text_missing, complete = delay(
        (["ada@example.com"], {"kind": "welcome", "context": {"name": "Ada"}}),
        (["ada@example.com"], {"kind": "code"}),
        (["ada@example.com"], {"kind": "notice", "body": "b"}),
        (["ada@example.com"], {"kind": "welcome", "context": {"name": "Ada", "plan": "pro"}}),
    )
    assert missing == (
        "InvalidArguments",
        "send_mail: context: the body template of kind 'welcome' needs variable 'plan'; "
        "give context={'plan': ...}",
    )
    assert none[0] == "InvalidArguments" and "needs variable 'code'" in none[1]
    assert text_missing == (
        "InvalidArguments",
        "send_mail: subject: kind 'notice' has no subject template; give subject=...",
    )
    assert complete == ("enqueued", "")


def test_the_receipt_check_refuses_what_delay_refuses() -> None:
    """``check_call`` (run by ``delay`` and again on a worker's receipt) refuses the same calls
    in this process: a bad positional address, an unknown kind, a missing variable."""
    for args, kwargs, named in (
        (["ada@"], {}, "send_mail: to: "),
        (["ada@example.com"], {"kind": "cod"}, "did you mean 'code'?"),
        (["ada@example.com"], {"kind": "code", "context": {"cod": 1}}, "give context={'code'"),
        (["ada@example.com"], {"reply_to": "x"}, 'give "Name <address>" or an address'),
    ):
        with pytest.raises(InvalidArguments, match=named.replace("?", r"\?")):
            check_call(args, kwargs)
    assert check_call(["ada@example.com"], {"kind": "code", "context": {"code": 1}})["kind"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"MAILGUARD_SENDER": "not an address"},
            'MAILGUARD_SENDER must be an address (noreply@example.com) or "Name '
            '<noreply@example.com>": it is neither',
        ),
        (
            {"MAILGUARD_SENDER": "Shop <shop@>"},
            "MAILGUARD_SENDER must be an address",
        ),
        (
            {"MAILGUARD_FAIL_MODE": "open"},
            "MAILGUARD_FAIL_MODE must be fail_closed or fail_open, got 'open'",
        ),
        ({"MAILGUARD_SMTP_ATTEMPTS": "0"}, "MAILGUARD_SMTP_ATTEMPTS must be >= 1, got 0"),
        ({"MAILGUARD_LOG_FORMAT": "xml"}, "MAILGUARD_LOG_FORMAT must be text or json"),
        (
            {"MAILGUARD_POLCY": "1/1s"},
            "unknown setting MAILGUARD_POLCY; did you mean MAILGUARD_POLICY?",
        ),
    ],
)
def test_a_bad_setting_is_one_line_naming_its_variable(env: dict[str, str], message: str) -> None:
    """``Settings.from_env`` refuses each with one line naming the variable (and, for a
    misspelt name, the closest known one instead of the whole list)."""
    with pytest.raises(ValueError) as raised:
        Settings.from_env(env)
    assert str(raised.value).startswith(message), str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_far_unknown_name_lists_the_known_ones_and_good_senders_pass() -> None:
    """A name close to none gets the list; the sender's accepted forms are accepted."""
    with pytest.raises(
        ValueError,
        match=r"unknown setting MAILGUARD_ZZZ; known: MAILGUARD_[A-Z_]+, .*MAILGUARD_BROKER_URL",
    ):
        Settings.from_env({"MAILGUARD_ZZZ": "1"})
    for sender in ("noreply@example.org", "Shop <shop@example.org>", "mailguard@localhost"):
        assert Settings.from_env({"MAILGUARD_SENDER": sender}).sender == sender


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"MAILGUARD_SENDER": "not an address"}, "mailguard: MAILGUARD_SENDER must be an address"),
        ({"MAILGUARD_FAIL_MODE": "open"}, "mailguard: MAILGUARD_FAIL_MODE must be fail_closed"),
        ({"MAILGUARD_POLCY": "1/1s"}, "did you mean MAILGUARD_POLICY?"),
    ],
)
def test_a_real_worker_refuses_to_start_naming_the_variable(
    env: dict[str, str], named: str
) -> None:
    """``celery -A workers.app worker`` exits non-zero with the one line, before ``ready.``."""
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "--pool", "solo"],
        env=_clean_env() | env | {"PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "Traceback" not in output and "ready." not in output
    lines = [line for line in output.splitlines() if line.startswith("mailguard: ")]
    assert len(lines) == 1 and named in lines[0], output


def test_from_url_on_redis_needs_the_workers_secret(redis_url: str) -> None:
    """``Limiter.from_url`` and ``AsyncLimiter.from_url`` on Redis without ``secret=`` are
    refused with one line naming ``secret=`` and ``MAILGUARD_SECRET``; with it they share the
    workers' budget; ``memory://`` needs none."""
    for build in (Limiter.from_url, AsyncLimiter.from_url):
        with pytest.raises(ValueError, match="needs secret=, the workers' MAILGUARD_SECRET") as e:
            build(redis_url, POLICY)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"redis://:\*\*\*@"):  # the password stays masked
        Limiter.from_url("redis://:hunter2@127.0.0.1:1/0", POLICY)
    worker = Limiter.from_url(redis_url, POLICY, secret="same-everywhere")

    async def peek() -> float:
        web = AsyncLimiter.from_url(redis_url, POLICY, secret="same-everywhere")
        try:
            return (await web.peek("ada@example.com")).wait
        finally:
            await web.close()

    try:
        assert worker.acquire("ada@example.com").allowed
        assert asyncio.run(peek()) > 0, "the async limiter reads the worker's budget"
    finally:
        worker.close()
    assert Limiter.from_url("memory://", POLICY).acquire("ada@example.com").allowed
