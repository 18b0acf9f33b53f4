"""What a Redis broker (kombu's Redis transport, database 1 here) holds, for tests that must
know where a message is: queued, or delivered and not acknowledged (kombu's ``unacked`` hash of
``[message, exchange, routing key]`` by delivery tag)."""

from __future__ import annotations

import json
from typing import Any

import redis

#: The database the suite's broker URLs name (devservers.celery_worker.worker_env).
BROKER_DB = 1


def unacked_headers(port: int) -> list[dict[str, Any]]:
    """The headers (task ``id``, ``eta``, ...) of every message the broker on ``port`` records
    as delivered and not acknowledged."""
    client = redis.Redis(port=port, db=BROKER_DB)
    try:
        return [dict(json.loads(raw)[0]["headers"]) for raw in client.hvals("unacked")]
    finally:
        client.close()
