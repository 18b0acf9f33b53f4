"""The ``mailguard`` command as a user runs it: real redis-server, a real worker, aiosmtpd.

``status``, ``reset`` and ``simulate`` run in-process through click's runner; ``send`` and
``outcome`` run the installed console script in a subprocess (the Celery app reads its
configuration once per process, as a user's shell would give it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from devservers.celery_worker import CeleryWorker, worker_env
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from mailer import Limiter, Policy
from workers.cli import main
from workers.cli.views import SUMMARY_COLUMNS

SCRIPT = Path(sys.executable).with_name("mailguard")
POLICY = "1/1s, 3/5s, 5/20s"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def invoke(args: list[str], env: Mapping[str, str] | None = None, stdin: str = "") -> Result:
    """Run the CLI in-process with exactly ``env`` as its MAILGUARD_* settings."""
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("MAILGUARD_")}
    clean.update(env or {})
    return CliRunner().invoke(main, args, env=clean, input=stdin)


def run(
    args: list[str], env: Mapping[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``mailguard`` script with ``env`` as its MAILGUARD_* settings."""
    assert SCRIPT.exists(), "the mailguard script is missing: pip install -e . (make install)"
    base = {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
    return subprocess.run(
        [str(SCRIPT), *args],
        env=base | dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_line_error(stderr: str) -> str:
    """The single stderr line of a failed command (asserting there is exactly one)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("mailguard: error: ") and "Traceback" not in stderr
    return lines[0]


def limiter_env(url: str) -> dict[str, str]:
    return {"MAILGUARD_LIMITER_URL": url, "MAILGUARD_POLICY": POLICY, "MAILGUARD_SECRET": "s1"}


def limiter_for(url: str) -> Limiter:
    policy = Policy.parse(POLICY, name="recipient")
    return Limiter.from_url(url, policy, secret="s1")


# --- simulate --------------------------------------------------------------------------------


def test_simulate_without_arguments_runs_the_built_in_day() -> None:
    """No arguments: the built-in day with one abused address, tables per kind and per tier."""
    result = invoke(["simulate"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "pattern day" in out and "1,001 recipients" in out
    for text in ("per kind", "per binding tier", "most limited recipients", "code", "5/1h"):
        assert text in out
    assert "…" not in out, "no header, kind or recipient label is cut"
    assert "target@example.org" not in out and "@example.com" not in out


def test_simulate_a_csv_trace_prints_the_hand_computed_counts(tmp_path: Path) -> None:
    """A 4-attempt code burst under 1/60s, 3/1h: 1 on time, 2 late (50 s, 100 s), 1 dropped."""
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "time,recipient,kind\n0,ada@example.com,code\n10,ada@example.com,code\n"
        "20,ada@example.com,code\n30,ada@example.com,code\n"
    )
    result = invoke(["simulate", "--csv", str(trace), "--policy", "1/60s, 3/1h"])
    assert result.exit_code == 0, result.output
    row = r"code\s+4\s+3\s+1\s+2\s+50s\s+1m 40s\s+1m 40s\s+1\s"
    assert re.search(row, result.stdout), result.stdout
    assert re.search(r"3/1h\s+0\s+-\s+-\s+-\s+1\s", result.stdout), result.stdout
    assert "ada@example.com" not in result.stdout


def test_simulate_max_wait_override_changes_the_outcome(tmp_path: Path) -> None:
    """--max-wait code=0 drops what would have been deferred."""
    trace = tmp_path / "trace.csv"
    trace.write_text("0,ada@example.com,code\n10,ada@example.com,code\n")
    result = invoke(["simulate", "--csv", str(trace), "--policy", "1/60s", "--max-wait", "code=0"])
    assert result.exit_code == 0, result.output
    assert re.search(r"code\s+2\s+1\s+1\s+0\s+-\s+-\s+-\s+1\s", result.stdout), result.stdout


def test_simulate_against_shows_two_policies_side_by_side() -> None:
    """--against replays the same trace through a scoped policy too: both rows per kind, each
    header whole on one line in an 80-column pipe (nothing cut to ``attemp…``)."""
    result = invoke(
        [
            "simulate",
            "--pattern",
            "bursts",
            "--recipients",
            "30",
            "--policy",
            "1/60s, 5/1h",
            "--against",
            "recipient: 1/60s, 5/1h; sender: 1/1s gcra",
        ]
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "A: 1/1m, 5/1h" in out and "B: recipient: 1/1m, 5/1h; sender: 1/1s gcra" in out
    assert re.search(r"default\s+A\s+450\s", out) and re.search(r"\n\s+B\s+450\s", out), out
    assert "B binding tiers:" in out and "sender 1/1s gcra" in out
    header = next(line for line in out.splitlines() if "dropped" in line)
    for column in ("kind", "policy", *SUMMARY_COLUMNS):
        assert f" {column} " in header, header
    assert "…" not in out, out


def test_simulate_plot_writes_a_png(tmp_path: Path) -> None:
    """--plot writes a PNG file (checked by its magic bytes)."""
    out = tmp_path / "sim.png"
    result = invoke(["simulate", "--pattern", "abuse", "--recipients", "50", "--plot", str(out)])
    assert result.exit_code == 0, result.output
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000


@pytest.mark.parametrize(
    ("args", "csv", "message"),
    [
        (
            ["--csv", "{csv}"],
            "0,ada@example.com\n1,ada@example.com,cod\n",
            "line 2: unknown kind 'cod'",
        ),
        (["--csv", "{csv}"], "0,ada@example.com\nsoon,ada@example.com\n", "line 2: time 'soon'"),
        (["--csv", "{csv}"], "0,ada@example.com\n1,ada.example.com\n", "line 2: address has no @"),
        (["--policy", "5/1y"], None, "--policy: bad tier '5/1y': unknown unit 'y'"),
        (["--csv", "{csv}", "--pattern", "day"], "", "give --csv or --pattern, not both"),
        (["--csv", "/nonexistent/trace.csv"], None, "cannot read /nonexistent/trace.csv"),
        (["--max-wait", "spam=1m"], None, "--max-wait 'spam=1m': unknown kind 'spam'"),
        (["--pattern", "waves"], None, "Invalid value for '--pattern'"),
    ],
)
def test_simulate_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], csv: str | None, message: str
) -> None:
    """A broken CSV line, bad policy or option: one stderr line naming it, exit code 2."""
    path = tmp_path / "trace.csv"
    if csv is not None:
        path.write_text(csv)
    result = invoke(["simulate", *(a.replace("{csv}", str(path)) for a in args)])
    assert result.exit_code == 2
    assert message in one_line_error(result.stderr)
    assert "ada" not in result.stderr


# --- status and reset ------------------------------------------------------------------------


def test_status_shows_used_per_tier_next_slot_and_bookings(redis_url: str) -> None:
    """After a send and a booking, status counts both, names the binding tier, hides the address."""
    limiter = limiter_for(redis_url)
    assert limiter.acquire("ada@example.com", mail_id="m1").allowed
    assert limiter.acquire("ada@example.com", mail_id="m2", max_wait=60).booked
    result = invoke(["status", "Ada+news@Example.com", "--json"], limiter_env(redis_url))
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert status["recipient"] == limiter.storage_key("recipient", "ada@example.com")
    assert status["booked"] == 1 and status["allowed_now"] is False
    assert status["binding_tier"] == "1/1s" and 1.0 < status["wait"] <= 2.0
    assert [(t["tier"], t["used"], t["limit"]) for t in status["tiers"]] == [
        ("1/1s", 1, 1),  # the booking, a second ahead, is in the window too
        ("3/5s", 2, 3),
        ("5/20s", 2, 5),
    ]
    table = invoke(["status", "ada@example.com"], limiter_env(redis_url))
    assert table.exit_code == 0
    assert "booked     1 future send" in table.stdout and "bound by 1/1s" in table.stdout
    assert "ada@" not in table.stdout.lower()
    limiter.close()


def test_status_of_an_unknown_recipient_says_now(redis_url: str) -> None:
    """A recipient never sent to may be sent to now, with nothing used and nothing booked."""
    result = invoke(["status", "new@example.com"], limiter_env(redis_url))
    assert result.exit_code == 0
    assert "next mail  now" in result.stdout and "booked     0 future sends" in result.stdout


SCOPED = "recipient: 1/60s, 5/1h; domain: 600/1m; sender: 4/2s, 100/1d fixed; tenant: 9/30d fixed"


def test_status_under_a_scoped_policy_shows_every_scope(redis_url: str) -> None:
    """status ADDRESS --tenant: the next slot and each scope's room; --sender and --tenant NAME
    alone: those shared scopes; read through the workers' own scoped limiter."""
    secret = os.urandom(8).hex()  # a budget of this test's own on the session's Redis
    env = {
        "MAILGUARD_LIMITER_URL": redis_url,
        "MAILGUARD_POLICY": SCOPED,
        "MAILGUARD_SECRET": secret,
    }
    limiter = Limiter.from_url(redis_url, Policy.parse(SCOPED, name="recipient"), secret=secret)
    for n in range(3):
        assert limiter.acquire(f"u{n}@gmail.com", tenant="acme", mail_id=f"m{n}").allowed
    limiter.close()

    result = invoke(["status", "U1@googlemail.com", "--tenant", "acme", "--json"], env)
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert status["allowed_now"] is False and status["binding_tier"] == "1/1m"
    used = {s["scope"]: [(t["tier"], t["used"]) for t in s["tiers"]] for s in status["scopes"]}
    assert used == {
        "recipient": [("1/1m", 1), ("5/1h", 1)],
        "domain": [("600/1m", 3)],
        "sender": [("4/2s", 3), ("100/1d fixed", 3)],
        "tenant": [("9/30d fixed", 3)],
    }
    sender = json.loads(invoke(["status", "--sender", "--json"], env).stdout)
    assert [s["scope"] for s in sender["scopes"]] == ["sender"] and "recipient" not in sender
    table = invoke(["status", "--tenant", "acme"], env)
    assert table.exit_code == 0 and re.search(
        r"tenant\s+acme\s+9/30d fixed\s+3 / 9\s+6", table.stdout
    )
    assert "gmail" not in invoke(["status", "u1@gmail.com"], env).stdout
    missing = invoke(["status"], env)
    assert missing.exit_code == 2 and "missing ADDRESS" in missing.stderr
    plain = invoke(["status", "--tenant", "acme"], limiter_env(redis_url))
    assert plain.exit_code == 2 and "has no sender or tenant scope" in plain.stderr


def test_status_sender_shows_a_hold_under_any_policy(redis_url: str) -> None:
    """status --sender: 'no hold', then the hold in force and its end (text and JSON), under a
    plain policy alone and beside a scoped policy's sender room."""
    from mailer.records.holds import Holds  # noqa: PLC0415

    env = limiter_env(redis_url)
    calm = invoke(["status", "--sender"], env)
    assert calm.exit_code == 0 and calm.stdout.strip() == "sender: no hold"
    hold = Holds.from_url(redis_url, secret="s1").hold_sender(120, "454 4.7.0 Throttling failure")
    shown = invoke(["status", "--sender"], env)
    assert shown.exit_code == 0, shown.output
    assert "sender held until" in shown.stdout and "(454 4.7.0 Throttling failure)" in shown.stdout
    as_json = json.loads(invoke(["status", "--sender", "--json"], env).stdout)
    assert as_json["hold"]["until"] == pytest.approx(hold.until, abs=1e-3)
    scoped = {**env, "MAILGUARD_POLICY": SCOPED}
    both = invoke(["status", "--sender"], scoped)
    assert both.exit_code == 0 and "4/2s" in both.stdout and "sender held until" in both.stdout


def test_reset_asks_and_forgets_only_when_confirmed(redis_url: str) -> None:
    """reset without --yes asks; 'n' keeps the budget (exit 1), 'y' or --yes forgets it."""
    limiter = limiter_for(redis_url)
    env = limiter_env(redis_url)
    limiter.acquire("bob@example.com")
    declined = invoke(["reset", "bob@example.com"], env, stdin="n\n")
    assert declined.exit_code == 1 and "not reset" in declined.stderr
    assert limiter.peek("bob@example.com").refused
    accepted = invoke(["reset", "bob@example.com"], env, stdin="y\n")
    assert accepted.exit_code == 0 and limiter.peek("bob@example.com").allowed
    limiter.acquire("bob@example.com")
    forced = invoke(["reset", "--yes", "bob@example.com"], env)
    assert forced.exit_code == 0 and limiter.peek("bob@example.com").allowed
    assert forced.stdout.strip() == f"reset {limiter.storage_key('recipient', 'bob@example.com')}"
    limiter.close()


@pytest.mark.parametrize("command", ["status", "reset"])
def test_status_and_reset_report_an_unreachable_redis(command: str) -> None:
    """An unreachable limiter: one line naming the URL, exit 1."""
    env = limiter_env("redis://127.0.0.1:1/0")
    result = invoke(
        [command, "--yes", "ada@example.com"]
        if command == "reset"
        else [command, "ada@example.com"],
        env,
    )
    assert result.exit_code == 1
    line = one_line_error(result.stderr)
    assert "redis://127.0.0.1:1/0 is unavailable" in line


@pytest.mark.parametrize(
    ("args", "env", "code", "message"),
    [
        (["status", "ada@"], {}, 2, "bad address: domain part (after the @-sign) is empty"),
        (["reset", "--yes", "not an address"], {}, 2, "bad address"),
        (["status", "ada@example.com"], {}, 1, "MAILGUARD_LIMITER_URL is memory://"),
        (
            ["status", "ada@example.com"],
            {"MAILGUARD_POLICY": "3/fortnight"},
            2,
            "MAILGUARD_POLICY: bad tier",
        ),
        (
            ["status", "ada@example.com"],
            {"MAILGUARD_LIMITER_URL": "mysql://x"},
            2,
            "unsupported limiter URL",
        ),
        (
            ["status", "ada@example.com"],
            {"MAILGUARD_LIMTER_URL": "x"},
            2,
            "unknown setting MAILGUARD_LIMTER_URL",
        ),
        (["send", "ada@example.com", "--kind", "spam"], {}, 2, "unknown kind 'spam'"),
        (["send", "ada@example.com", "--kind", "code"], {}, 2, "needs variable 'code'"),
        (
            ["send", "ada@example.com", "--kind", "code", "--context", "{x"],
            {},
            2,
            "--context is not valid JSON",
        ),
        (["send", "a@b@c", "--subject", "s", "--body", "b"], {}, 2, "bad address"),
        (
            ["send", "ada@example.com", "--subject", "s", "--body", "b"],
            {},
            1,
            "MAILGUARD_BROKER_URL is memory://",
        ),
        (
            ["status"],
            {},
            2,
            "missing ADDRESS (or --sender, --tenant NAME, --provider NAME, --dead-letters)",
        ),
        (["frobnicate"], {}, 2, "No such command 'frobnicate'"),
    ],
)
def test_bad_input_gives_one_line_and_the_promised_exit_code(
    args: list[str], env: dict[str, str], code: int, message: str
) -> None:
    """Malformed address, unknown kind, bad policy or settings: one line on stderr, exit 1 or 2."""
    result = invoke(args, env)
    assert result.exit_code == code, result.output
    line = one_line_error(result.stderr)
    assert message in line
    assert "ada@example.com" not in line


@pytest.mark.parametrize("command", ["worker", "send", "status", "reset", "outcome", "simulate"])
def test_every_command_has_help(command: str) -> None:
    """--help works on every command, shows mailguard's usage and exits 0."""
    result = invoke([command, "--help"])
    assert result.exit_code == 0
    assert result.stdout.startswith(f"Usage: mailguard {command}")


# --- send, outcome: a real worker ------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_stack() -> Iterator[tuple[dict[str, str], SmtpTestServer]]:
    """A redis-server, an aiosmtpd server and a threads-pool worker for this module's tests."""
    redis_server = RedisServer().start()
    smtp = SmtpTestServer().start()
    env = worker_env(redis_server.url, smtp.url, MAILGUARD_KIND_NOW_MAX_WAIT="0")
    worker = CeleryWorker(env, pool="threads", concurrency=2).start()
    try:
        yield env, smtp
    finally:
        worker.stop()
        smtp.stop()
        redis_server.cleanup()


def test_send_wait_prints_the_mail_id_then_the_sent_outcome(
    cli_stack: tuple[dict[str, str], SmtpTestServer],
) -> None:
    """send --wait prints the id, then the outcome: sent, exit 0, one mail delivered."""
    env, smtp = cli_stack
    before = len(smtp.delivered)
    done = run(["send", "Dora@Example.com", "--subject", "Hi", "--body", "Hello", "--wait"], env)
    assert done.returncode == 0, done.stderr
    mail_id = done.stdout.splitlines()[0]
    assert re.fullmatch(r"[0-9a-f-]{36}", mail_id)
    assert "SUCCESS" in done.stdout and re.search(r"status\s+sent", done.stdout)
    assert "dora@" not in (done.stdout + done.stderr).lower()
    assert len(smtp.delivered) == before + 1
    assert smtp.delivered[-1].rcpt_tos == ("Dora@example.com",)
    shown = run(["outcome", mail_id, "--json"], env)
    assert shown.returncode == 0, shown.stderr
    outcome = json.loads(shown.stdout)
    assert outcome["state"] == "SUCCESS" and outcome["outcome"]["status"] == "sent"
    assert outcome["outcome"]["mail_id"] == mail_id and outcome["outcome"]["kind"] == "default"


def test_send_wait_reports_a_dropped_mail_with_exit_1(
    cli_stack: tuple[dict[str, str], SmtpTestServer],
) -> None:
    """A mail of a kind that may not wait, after others: dropped, its tier named, exit 1.

    The recipient's budget is booked ahead first through the workers' own limiter (five
    bookings, the last about 20 s ahead), so the answer does not depend on how fast the CLI
    starts."""
    env, _ = cli_stack
    first = run(
        ["send", "eve@example.com", "--kind", "now", "--subject", "a", "--body", "b", "--wait"], env
    )
    assert first.returncode == 0, first.stderr
    limiter = Limiter.from_url(
        env["MAILGUARD_LIMITER_URL"],
        Policy.parse(env["MAILGUARD_POLICY"], name="recipient"),
        secret=env["MAILGUARD_SECRET"],
    )
    try:
        for n in range(5):
            limiter.acquire("eve@example.com", mail_id=f"filler-{n}", max_wait=60)
    finally:
        limiter.close()
    second = run(
        [
            "send",
            "eve@example.com",
            "--kind",
            "now",
            "--subject",
            "a",
            "--body",
            "b",
            "--mail-id",
            "cli-dropped-1",
            "--wait",
        ],
        env,
    )
    assert second.returncode == 1, second.stdout + second.stderr
    assert second.stdout.splitlines()[0] == "cli-dropped-1"
    assert re.search(r"status\s+dropped", second.stdout) and re.search(
        r"reason\s+rate_limited", second.stdout
    )
    # The tier that refuses first depends on where between the booked slots the run lands
    # (the CLI's start takes longer on a loaded machine): one of the policy's, named.
    assert re.search(r"tier\s+(1/1s|3/5s|5/20s)\b", second.stdout), second.stdout
    shown = run(["outcome", "cli-dropped-1"], env)
    assert shown.returncode == 0 and re.search(r"status\s+dropped", shown.stdout)


def test_outcome_of_an_unknown_mail_id_is_not_found(
    cli_stack: tuple[dict[str, str], SmtpTestServer],
) -> None:
    """An id no worker has seen: one line saying so, exit 1."""
    env, _ = cli_stack
    result = run(["outcome", "no-such-mail"], env)
    assert result.returncode == 1
    assert "no outcome for mail id 'no-such-mail'" in one_line_error(result.stderr)


def test_send_to_an_unreachable_broker_is_one_line_and_exit_1(
    cli_stack: tuple[dict[str, str], SmtpTestServer],
) -> None:
    """A broker that cannot be reached: one line naming it, exit 1, no traceback."""
    env, _ = cli_stack
    bad = env | {"MAILGUARD_BROKER_URL": "redis://127.0.0.1:1/1"}
    result = run(["send", "ada@example.com", "--subject", "s", "--body", "b"], bad)
    assert result.returncode == 1
    assert "cannot enqueue on the broker redis://127.0.0.1:1/1" in one_line_error(result.stderr)
