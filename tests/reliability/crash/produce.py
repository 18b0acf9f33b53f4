"""A producer process for the crash tests: ``python -m tests.reliability.crash.produce to=...``.

Enqueues each mail with ``send_mail.apply_async`` (the caller's path: the enqueue checks and
whatever ``delay()`` records) under the ``MAILGUARD_*`` variables it was started with, its task
id being its mail id; prints ``<mail_id> <epoch seconds>`` as each is handed to the broker.
"""

from __future__ import annotations

import sys
import time

from workers.tasks import send_mail


def main(argv: list[str]) -> None:
    for spec in argv:
        to, _, mail_id = spec.partition("=")
        print(mail_id, f"{time.time():.3f}", flush=True)
        kwargs = {"subject": mail_id, "body": "x", "mail_id": mail_id}
        send_mail.apply_async((to,), kwargs, task_id=mail_id)


if __name__ == "__main__":
    main(sys.argv[1:])
