"""A Django project's settings for a worker with ``MAILGUARD_TRANSPORT=django``
(``DJANGO_SETTINGS_MODULE=tests.mail.transports.transport_django_settings``,
tests/mail/transports/test_transport_django.py): Django's own ``EMAIL_*`` settings name the SMTP
server the worker sends through."""

from __future__ import annotations

import os

SECRET_KEY = "test-only"
INSTALLED_APPS: list[str] = []
EMAIL_HOST = "127.0.0.1"
EMAIL_PORT = int(os.environ["TEST_EMAIL_PORT"])
EMAIL_USE_TLS = False
EMAIL_TIMEOUT = 10
