"""Log lines as JSON, one object a line (``MAILGUARD_LOG_FORMAT=json`` in the worker), and
text lines with their times in UTC (``text``, Celery's format).

The guard's records carry structured fields (``logging`` ``extra=``): ``mail_id``,
``recipient`` (the keyed hash the outcome carries, never the address), ``kind``, ``status``,
``reason``, ``tier``. :class:`JsonFormatter` writes those and a fixed set of others; any other
attribute a library puts on a record is left out, so nothing unvetted reaches the log.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime, timezone
from typing import Any

#: Record attributes written when present and not None, in this order.
FIELDS = ("mail_id", "recipient", "kind", "status", "reason", "tier", "task_id", "task_name")


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "process", "message", <FIELDS>, "exc"}`` on one line."""

    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        """The object written for ``record`` (subclasses add to it)."""
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "process": record.process,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                data[name] = value
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            data["exc"] = record.exc_text
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        return data

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(self.fields(record), default=str, ensure_ascii=False)


def in_utc(formatter: logging.Formatter) -> logging.Formatter:
    """``formatter`` with its ``%(asctime)s`` in UTC, whatever the process's time zone: Django
    sets ``TZ`` to the project's ``TIME_ZONE`` (and calls ``time.tzset()``) when its settings
    load, which would shift local times in a worker that loads a Django project. Changed in
    place and returned."""
    formatter.converter = time.gmtime
    return formatter
