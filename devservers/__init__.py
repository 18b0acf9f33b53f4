"""Real servers for the test suite and the benchmarks, started and stopped by themselves.

Not part of mailguard (not in the wheel): a development helper that ``tests/`` and
``benchmarks/`` both import, so neither reaches into the other.

- :mod:`devservers.redis_servers`: ``redis-server`` processes on free ports (single, cluster,
  sentinel) and :func:`~devservers.redis_servers.free_port`;
- :mod:`devservers.celery_worker`: ``celery -A workers.app worker`` as a subprocess configured
  by ``MAILGUARD_*`` variables, and a client app with the same configuration.
"""
