"""No default loses mail: with no configuration, ``send_mail.delay`` refuses rather than enqueue
on an in-process broker nobody reads; the shared task's queue is consumed by any app's worker;
parked mails belong to the queue whatever app parked them (``tests/workers/celery/test_own_app.py``:
seen and sent by any app's worker, a worker on another broker refused).

Each case runs in a subprocess with a clean environment (no ``MAILGUARD_*`` of the suite's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The refusal's start, as the caller sees it.
REFUSAL = "mailguard: MAILGUARD_BROKER_URL is memory://, a broker inside this process that no"


def run_clean(script: str, **extra: str) -> Any:
    """Run ``script`` with no ``MAILGUARD_*`` variable (plus ``extra``); its last line, as JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
    env |= {"PYTHONPATH": str(ROOT), **extra}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


REFUSED = """
import json
from workers.tasks import send_mail
seen = []
for call in (
    lambda: send_mail.delay("ada@example.com", subject="s", body="b"),
    lambda: send_mail.apply_async(args=["ada@example.com"], kwargs={"subject": "s", "body": "b"}),
):
    try:
        call()
    except Exception as exc:
        seen.append([type(exc).__name__, str(exc)])
    else:
        seen.append(None)
print(json.dumps(seen))
"""


def test_delay_with_no_configuration_refuses_in_one_line_naming_the_broker() -> None:
    """``delay`` and ``apply_async`` on the embedded ``memory://`` broker, with no worker in
    the process, raise :class:`~workers.run.call.NoConsumer`: one line naming
    ``MAILGUARD_BROKER_URL``, nothing enqueued."""
    seen = run_clean(REFUSED)
    assert len(seen) == 2
    for refusal in seen:
        assert refusal is not None, "enqueued on a broker nobody reads"
        name, message = refusal
        assert name == "NoConsumer"
        assert message.startswith(REFUSAL), message
        assert "\n" not in message


DJANGO = """
import json
import django
from django.conf import settings
settings.configure(EMAIL_BACKEND="workers.django.EmailBackend")
django.setup()
from django.core.mail import send_mail
seen = []
for silently in (False, True):
    try:
        sent = send_mail("s", "b", "shop@example.org", ["ada@example.com"], fail_silently=silently)
    except Exception as exc:
        seen.append([type(exc).__name__, str(exc)])
    else:
        seen.append(sent)
print(json.dumps(seen))
"""


def test_djangos_send_mail_with_no_configuration_refuses_even_when_silent() -> None:
    """Django's ``send_mail`` through the backend raises the same line, ``fail_silently`` or
    not (it would otherwise return 1, or 0, and lose every mail)."""
    seen = run_clean(DJANGO)
    assert [s[0] if isinstance(s, list) else s for s in seen] == ["NoConsumer", "NoConsumer"]
    assert all(s[1].startswith(REFUSAL) for s in seen), seen


IN_PROCESS = """
import json
from workers.app import app
from workers.tasks import send_mail
from workers.brokers.inprocess import inprocess_worker
with inprocess_worker(app):
    outcome = send_mail.delay("ada@example.com", subject="s", body="b").get(timeout=20)
try:
    send_mail.delay("ada@example.com", subject="s", body="b")
    after = None
except Exception as exc:
    after = str(exc)
print(json.dumps([outcome["status"], after]))
"""


@pytest.mark.server  # an in-process Celery worker, in a subprocess
def test_an_in_process_worker_consumes_the_memory_broker() -> None:
    """While an in-process worker runs, ``delay`` on ``memory://`` is accepted and the mail is
    sent; once it stopped, ``delay`` refuses again."""
    status, after = run_clean(IN_PROCESS, MAILGUARD_SMTP_URL="memory://")
    assert status == "sent"
    assert after is not None and after.startswith(REFUSAL), after
