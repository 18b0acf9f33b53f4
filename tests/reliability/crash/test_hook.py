"""The crash-point hook itself (mailer/crashpoints.py), in child processes of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from devservers.celery_worker import ROOT
from mailer.crashpoints import POINTS, VARIABLE, crash_point

SCRIPT = """
from mailer.crashpoints import crash_point
for n in range(1, 4):
    crash_point("claimed")
    print(n, flush=True)
"""


def _run(value: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != VARIABLE} | {VARIABLE: value}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=env | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        start_new_session=True,
    )


def test_the_process_dies_the_nth_time_it_reaches_the_point() -> None:
    """``claimed:2``: the process passes the point once and is SIGKILLed the second time."""
    done = _run("claimed:2")
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.split() == ["1"]


def test_another_point_never_fires() -> None:
    """A process told to die at ``smtp-data`` passes ``claimed`` as often as it likes."""
    done = _run("smtp-data")
    assert (done.returncode, done.stdout.split()) == (0, ["1", "2", "3"])


def test_an_unknown_point_or_count_is_refused_at_import_in_one_line() -> None:
    """A misspelt point, or a count that is not a whole number >= 1, stops the process at
    import with one line naming the variable (and, for a point, the known ones)."""
    for value, said in (("claimd", "unknown crash point 'claimd'"), ("claimed:0", ">= 1")):
        done = _run(value)
        assert done.returncode == 1
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith(f"ValueError: {VARIABLE}") and said in last, last
    assert ", ".join(POINTS) in _run("claimd").stderr


def test_unset_it_does_nothing() -> None:
    """Without the variable (this test process) every point is a no-op."""
    for name in POINTS:
        crash_point(name)
