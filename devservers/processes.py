"""Stopping a server process the suite started, by its pid."""

from __future__ import annotations

import os
import signal
import subprocess


def terminate(process: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """SIGTERM to ``process``, SIGKILL after ``timeout`` seconds; nothing if it is not running."""
    if process is None or process.poll() is not None:
        return
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout)
