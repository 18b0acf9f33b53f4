"""Settings from MAILGUARD_* variables, and the embedded defaults that need nothing installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mailer.settings import Settings
from workers.tasks import send_mail

ROOT = Path(__file__).resolve().parent.parent


def test_no_environment_means_one_process_on_memory() -> None:
    """With no variables: memory broker, memory limiter, console transport, reference policy."""
    settings = Settings.from_env({})
    assert (settings.broker_url, settings.limiter_url, settings.smtp_url) == (
        "memory://",
        "memory://",
        "console://",
    )
    assert str(settings.policy) == "1/1m, 5/1h, 10/1d"
    assert settings.fail_mode == "fail_closed"
    assert settings.park_after == 30 and settings.longest_countdown == 30
    assert settings.visibility_timeout == 2 * 30 + 300, "parked waits are not countdowns"
    assert set(settings.kinds) == {"default", "code", "notice"}


def test_with_parking_max_countdown_bounds_only_short_waits() -> None:
    """A long ``MAX_COUNTDOWN`` on RabbitMQ is fine while parking is on: waits past
    ``PARK_AFTER`` are parked, so no countdown reaches the consumer timeout, and the Redis
    visibility timeout follows the shorter bound."""
    settings = Settings.from_env(
        {"MAILGUARD_BROKER_URL": "amqp://h//", "MAILGUARD_MAX_COUNTDOWN": "2h"}
    )
    assert settings.longest_countdown == 30 and settings.problems() == []
    assert settings.visibility_timeout == 2 * 30 + 300


def test_variables_are_read() -> None:
    """Every documented variable changes its setting; durations accept units."""
    settings = Settings.from_env(
        {
            "MAILGUARD_BROKER_URL": "redis://h:1/1",
            "MAILGUARD_RESULT_BACKEND": "redis://h:1/2",
            "MAILGUARD_LIMITER_URL": "redis://h:1/0",
            "MAILGUARD_SMTP_URL": "smtps://u:p@mail:465",
            "MAILGUARD_POLICY": "2/1s, 4/1m",
            "MAILGUARD_SECRET": "k",
            "MAILGUARD_SENDER": "noreply@example.org",
            "MAILGUARD_FAIL_MODE": "fail_open",
            "MAILGUARD_QUEUE": "mails",
            "MAILGUARD_MAX_COUNTDOWN": "2m",
            "MAILGUARD_SEND_RETRIES": "7",
            "MAILGUARD_RETRY_BACKOFF": "1.5s",
            "MAILGUARD_CLAIM_LEASE": "90",
            "MAILGUARD_SMTP_ATTEMPTS": "4",
            "MAILGUARD_KIND_CODE_MAX_WAIT": "90s",
            "MAILGUARD_KIND_WELCOME_SUBJECT": "Welcome {{ name }}",
            "MAILGUARD_PARK_AFTER": "off",
            "MAILGUARD_PROMOTE_LEASE": "10s",
        }
    )
    assert (settings.park_after, settings.promote_lease) == (None, 10)
    assert (
        settings.limiter_url == "redis://h:1/0"
        and settings.effective_ledger_url == settings.limiter_url
    )
    assert str(settings.policy) == "2/1s, 4/1m" and settings.fail_mode == "fail_open"
    assert (settings.max_countdown, settings.retry_backoff, settings.claim_lease) == (120, 1.5, 90)
    assert (settings.send_retries, settings.smtp_attempts, settings.queue) == (7, 4, "mails")
    assert settings.visibility_timeout == 2 * 120 + 300
    assert settings.kinds["code"].max_wait == 90 and "welcome" in settings.kinds


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MAILGUARD_POLICY": "1/5x"}, "MAILGUARD_POLICY: bad tier"),
        ({"MAILGUARD_MAX_COUNTDOWN": "soon"}, "MAILGUARD_MAX_COUNTDOWN"),
        ({"MAILGUARD_SEND_RETRIES": "many"}, "MAILGUARD_SEND_RETRIES"),
        ({"MAILGUARD_FAIL_MODE": "maybe"}, "MAILGUARD_FAIL_MODE must be fail_closed or fail_open"),
        ({"MAILGUARD_LIMITTER_URL": "redis://"}, "unknown setting MAILGUARD_LIMITTER_URL"),
        ({"MAILGUARD_PACE_START": "0.001"}, "MAILGUARD_PACE_START must be 0.01-10000"),
        ({"MAILGUARD_PACE_STEP": "-1"}, "MAILGUARD_PACE_STEP must be 0-10000"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    """A bad value or a misspelt variable raises ValueError naming it."""
    with pytest.raises(ValueError, match=message):
        Settings.from_env(env)


@pytest.mark.server  # an in-process Celery worker, in a subprocess
def test_embedded_defaults_send_a_mail_in_one_process() -> None:
    """With no MAILGUARD_* variables, send_mail.delay runs on an in-process worker."""
    script = (
        "import json\n"
        "from workers.app import app\n"
        "from workers.tasks import send_mail\n"
        "from workers.brokers.inprocess import inprocess_worker\n"
        "with inprocess_worker(app):\n"
        "    first = send_mail.delay('ada@example.com', kind='code', context={'code': '42'})\n"
        "    outcome = first.get(timeout=20)\n"  # then the second mail finds the slot taken
        "    second = send_mail.delay('ada@example.com', subject='s', body='b')\n"
        "    plain = send_mail.delay('bob@example.com').get(timeout=20)\n"
        "    import time\n"
        "    deadline = time.monotonic() + 20\n"
        "    while second.state == 'PENDING' and time.monotonic() < deadline:\n"
        "        time.sleep(0.05)\n"
        "    print(json.dumps([outcome, second.state, second.info, plain]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    first, second_state, second_info, plain = json.loads(done.stdout.strip().splitlines()[-1])
    assert first["status"] == "sent" and first["kind"] == "code"
    assert second_state == "DEFERRED" and second_info["tier"] == "1/1m"
    assert plain["status"] == "sent", "send_mail.delay(addr) alone works (default kind's text)"
    assert "message-id=" in done.stderr, "the console transport printed the mail"
    assert "ada@example.com" not in done.stderr, "no address in clear in the output"


def test_arguments_a_worker_could_not_decode_are_refused_at_enqueue() -> None:
    """A context kombu would misread as a typed value is refused by delay(), not left PENDING."""
    with pytest.raises(ValueError, match="cannot travel as JSON"):
        send_mail.delay("a@example.com", context={"__type__": "nope", "__value__": 1})
    with pytest.raises(ValueError, match="cannot travel as JSON"):
        send_mail.delay("a@example.com", context={"when": object()})


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"MAILGUARD_MAX_COUNTDOWN": "abc"}, "MAILGUARD_MAX_COUNTDOWN: bad duration"),
        ({"MAILGUARD_SMTP_URL": "smpt://mail.example.com"}, "MAILGUARD_SMTP_URL: bad SMTP URL"),
        ({"MAILGUARD_KIND_CODE_MAX_WAIT": "soon"}, "MAILGUARD_KIND_CODE_MAX_WAIT"),
        ({"MAILGUARD_LIMITER_URL": "redis://127.0.0.1:1/0"}, "MAILGUARD_SECRET is not set"),
        (
            {
                "MAILGUARD_BROKER_URL": "amqp://127.0.0.1:1//",
                "MAILGUARD_MAX_COUNTDOWN": "2h",
                "MAILGUARD_PARK_AFTER": "off",
            },
            "MAILGUARD_MAX_COUNTDOWN (7200 s) reaches RabbitMQ's default consumer_timeout",
        ),
        (
            {
                "MAILGUARD_BROKER_URL": "amqp://127.0.0.1:1//",
                "MAILGUARD_MAX_COUNTDOWN": "2h",
                "MAILGUARD_PARK_AFTER": "1h",
            },
            "MAILGUARD_PARK_AFTER (3600 s) reaches RabbitMQ's default consumer_timeout",
        ),
        ({"MAILGUARD_PARK_AFTER": "never"}, "MAILGUARD_PARK_AFTER: bad duration"),
    ],
)
def test_a_worker_refuses_a_bad_configuration_at_start(env: dict[str, str], named: str) -> None:
    """Plain `celery -A workers.app worker` exits non-zero with one line naming the variable."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "--pool", "solo"],
        env=base | env | {"PYTHONPATH": str(ROOT)},
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


def test_the_cli_refuses_what_a_worker_refuses() -> None:
    """`mailguard status` on a shared limiter without a secret: the same one line, exit 2."""
    from click.testing import CliRunner  # noqa: PLC0415

    from workers.cli import main  # noqa: PLC0415

    env = {"MAILGUARD_LIMITER_URL": "redis://127.0.0.1:1/0"}
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("MAILGUARD_")}
    result = CliRunner().invoke(main, ["status", "ada@example.com"], env=clean | env)
    assert result.exit_code == 2
    assert "MAILGUARD_SECRET is not set" in result.output


def test_a_scoped_policy_builds_the_scoped_limiter_and_bad_ones_are_one_line() -> None:
    """A scoped or fixed/gcra MAILGUARD_POLICY gives the guard's limiter the scoped store
    (recipient sliding tiers alone keep the single-key one); a bad scope is refused in one
    line."""
    from mailer.factory import build_guard_limiter  # noqa: PLC0415
    from mailer.limits.stores.memory import SlidingMemoryStore  # noqa: PLC0415
    from mailer.limits.stores.scoped_memory import ScopedMemoryStore  # noqa: PLC0415

    scoped = Settings.from_env({"MAILGUARD_POLICY": "recipient: 1/60s; sender: 14/1s gcra"})
    assert isinstance(build_guard_limiter(scoped).store, ScopedMemoryStore)
    fixed = Settings.from_env({"MAILGUARD_POLICY": "100/1d fixed"})
    assert isinstance(build_guard_limiter(fixed).store, ScopedMemoryStore)
    assert isinstance(build_guard_limiter(Settings.from_env({})).store, SlidingMemoryStore)
    with pytest.raises(ValueError, match="MAILGUARD_POLICY: unknown scope 'sendr'"):
        Settings.from_env({"MAILGUARD_POLICY": "sendr: 4/2s"})


def test_the_timezone_of_fixed_windows_is_a_setting() -> None:
    """MAILGUARD_TIMEZONE reaches the scoped limiter; an unknown zone is one line naming it."""
    from mailer.factory import build_guard_limiter  # noqa: PLC0415
    from mailer.limits.stores.scoped_memory import ScopedMemoryStore  # noqa: PLC0415

    paris = Settings.from_env(
        {"MAILGUARD_POLICY": "100/1d fixed", "MAILGUARD_TIMEZONE": "Europe/Paris"}
    )
    limiter = build_guard_limiter(paris)
    assert isinstance(limiter.store, ScopedMemoryStore) and str(limiter.store.tz) == "Europe/Paris"
    with pytest.raises(ValueError, match="MAILGUARD_TIMEZONE: unknown time zone 'Mars/Base'"):
        Settings.from_env({"MAILGUARD_TIMEZONE": "Mars/Base"})
