"""A Django project's settings with a ``TIME_ZONE`` far from UTC (UTC+14): loading them sets the
process's ``TZ`` and calls ``time.tzset()``, as Django does (test_django_log_times.py here)."""

from __future__ import annotations

SECRET_KEY = "test-only"
INSTALLED_APPS: list[str] = []
TIME_ZONE = "Pacific/Kiritimati"
USE_TZ = True
