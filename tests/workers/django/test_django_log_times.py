"""A worker that loads a Django project writes its log times in UTC, whatever the project's
``TIME_ZONE``: a real worker (``-A tests.workers.django.django_tz_project``, Django settings with
``TIME_ZONE = "Pacific/Kiritimati"``, UTC+14), a real Redis and SMTP server."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from devservers.celery_worker import CeleryWorker, worker_env
from devservers.smtp_server import SmtpTestServer

_LINE_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d{3}: ", re.M)


def test_worker_log_times_are_utc_under_a_django_time_zone(
    redis_url: str, smtp_server: SmtpTestServer
) -> None:
    """Django set the worker's TZ to UTC+14, yet every line's time lies between the UTC times
    read just before the worker started and just after it stopped (UTC+14 would be 14 hours
    later)."""
    before = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    worker = CeleryWorker(
        worker_env(redis_url, smtp_server.url), app_module="tests.workers.django.django_tz_project"
    )
    worker.start()
    worker.stop()
    after = datetime.now(UTC).replace(tzinfo=None) + timedelta(seconds=1)
    log = worker.log()
    assert "django-tz-offset +1400" in log, "Django set the process's time zone"
    times = [datetime.fromisoformat(t) for t in _LINE_TIME.findall(log)]
    assert times, log[-2000:]
    assert all(before <= t <= after for t in times), (before, after, times)
