"""A worker refuses to start, in one line naming the variable, on a transport it cannot build:
an unknown name, SES without a region, a Django backend that does not import, Django without
settings, Anymail without an ESP, with one it does not ship, or without the ESP's token."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from devservers.celery_worker import ROOT


def _clean_env() -> dict[str, str]:
    """This process's environment without any MAILGUARD_ or Django variable."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MAILGUARD_", "ANYMAIL_")) and k != "DJANGO_SETTINGS_MODULE"
    }


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"MAILGUARD_TRANSPORT": "mailgun"}, "MAILGUARD_TRANSPORT must be one of smtp, django"),
        ({"MAILGUARD_TRANSPORT": "ses"}, "MAILGUARD_SES_REGION must be set"),
        (
            {
                "MAILGUARD_TRANSPORT": "django",
                "MAILGUARD_DJANGO_BACKEND": "anymail.backends.nosuchesp.EmailBackend",
                "DJANGO_SETTINGS_MODULE": "tests.mail.transports.transport_django_settings",
                "TEST_EMAIL_PORT": "25",
            },
            "MAILGUARD_DJANGO_BACKEND: cannot import the Django backend "
            "'anymail.backends.nosuchesp.EmailBackend'",
        ),
        (
            {"MAILGUARD_TRANSPORT": "django"},
            "MAILGUARD_DJANGO_BACKEND: the django transport needs Django settings",
        ),
        ({"MAILGUARD_TRANSPORT": "anymail"}, "MAILGUARD_ANYMAIL_ESP must be set"),
        (
            {"MAILGUARD_TRANSPORT": "anymail", "MAILGUARD_ANYMAIL_ESP": "pigeon"},
            "MAILGUARD_ANYMAIL_ESP must be one of amazon_ses, brevo,",
        ),
        (
            {"MAILGUARD_TRANSPORT": "anymail", "MAILGUARD_ANYMAIL_ESP": "postmark"},
            "MAILGUARD_TRANSPORT=anymail: ANYMAIL_POSTMARK_SERVER_TOKEN must be set with "
            "MAILGUARD_ANYMAIL_ESP=postmark",
        ),
    ],
    ids=[
        "unknown",
        "ses-no-region",
        "django-bad-path",
        "django-no-settings",
        "anymail-no-esp",
        "anymail-unknown-esp",
        "anymail-no-token",
    ],
)
def test_a_worker_refuses_a_transport_it_cannot_build(env: dict[str, str], named: str) -> None:
    """``celery -A workers.app worker`` exits non-zero with the one line, before ``ready.``."""
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "--pool", "solo"],
        env=_clean_env() | env | {"PYTHONPATH": str(ROOT)},
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
