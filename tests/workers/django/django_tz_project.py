"""A Django project's Celery module (``celery -A tests.workers.django.django_tz_project worker``):
Django's settings load first (``TIME_ZONE`` UTC+14, django_tz_settings.py here), then mailguard's
app, as a project's ``celery.py`` does. Prints the process's UTC offset once Django set it."""

from __future__ import annotations

import os
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.workers.django.django_tz_settings")
django.setup()
print(f"django-tz-offset {time.strftime('%z')}", flush=True)

from workers.app import app  # noqa: E402 - after Django, as in a project

__all__ = ["app"]
