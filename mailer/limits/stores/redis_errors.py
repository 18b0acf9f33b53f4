"""What "the Redis server is down" means to mailguard, written once for the limiter and the ledger.

:data:`REDIS_DOWN` lists the redis-py exceptions that say the server cannot be reached or cannot
take a write now (connection refused or lost, timeout, a read-only replica after a failover, a
Cluster without a quorum). Callers translate exactly these into
:class:`mailer.errors.BackendUnavailable`; any other Redis error is a bug and propagates.
"""

from __future__ import annotations

import redis.exceptions

#: The redis-py exceptions that mean "the backend is down", not "the command was wrong".
REDIS_DOWN: tuple[type[redis.exceptions.RedisError], ...] = (
    redis.exceptions.ConnectionError,  # includes sentinel's MasterNotFoundError
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.ClusterError,
)
