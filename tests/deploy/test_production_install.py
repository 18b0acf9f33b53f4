"""The production install: ``pip install .`` (no extras) into a clean virtualenv runs a worker.

``make test`` installs the dev extra, which pulls in packages a plain install may lack (kombu's
Redis transport imports ``packaging``, which kombu lists only under its ``redis`` extra). This
test installs the project as the ``Dockerfile`` does, then starts that install's own worker on a
real Redis and sends one mail through its own CLI to a real SMTP server.
"""

from __future__ import annotations

import os
import subprocess
import time
import venv
from pathlib import Path

import pytest

from devservers.smtp_server import SmtpTestServer

ROOT = Path(__file__).resolve().parents[2]

SEND_OPTIONS = ("--subject", "Hi", "--body", "Hello", "--wait", "--timeout", "60")

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def _install(target: Path) -> Path:
    """A fresh virtualenv at ``target`` with ``pip install ROOT`` and nothing else; its bin/."""
    venv.EnvBuilder(with_pip=True).create(target)
    bin_dir = target / "bin"
    done = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return bin_dir


@pytest.mark.timeout(600)
def test_a_plain_install_starts_a_worker_that_sends(
    tmp_path: Path, redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """A worker from a plain ``pip install .`` starts on Redis and delivers one mail."""
    bin_dir = _install(tmp_path / "venv")
    base = redis_url.rsplit("/", 1)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAILGUARD_", "PYTHON"))}
    env |= {
        "MAILGUARD_BROKER_URL": f"{base}/1",
        "MAILGUARD_RESULT_BACKEND": f"{base}/2",
        "MAILGUARD_LIMITER_URL": f"{base}/0",
        "MAILGUARD_SMTP_URL": smtp_server.url,
        "MAILGUARD_SECRET": "test-secret",
    }
    # Outside the repository, so that only the installed package can be imported.
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [str(bin_dir / "celery"), "-A", "workers.app", "worker", "-c", "1", "-Q", "mail"],
        env=env,
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        sent = subprocess.run(
            [str(bin_dir / "mailguard"), "send", "ada@example.com", *SEND_OPTIONS],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        worker_log = (tmp_path / "worker.log").read_text(errors="replace")
        assert sent.returncode == 0, f"{sent.stdout}{sent.stderr}\n{worker_log[-3000:]}"
        deadline = time.monotonic() + 10
        while not smtp_server.delivered and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [d.message["Subject"] for d in smtp_server.delivered] == ["Hi"]
        assert worker.poll() is None, "the worker exited"
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()
