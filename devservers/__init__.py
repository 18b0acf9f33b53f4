"""Real servers for the test suite and the benchmarks, started and stopped by themselves.

Not part of mailguard (not in the wheel): a development helper that ``tests/`` and
``benchmarks/`` both import, so neither reaches into the other.

- :mod:`devservers.ports`: :func:`~devservers.ports.free_port` and
  :func:`~devservers.ports.cluster_port`, outside the kernel's ephemeral range and reserved for
  the process, so no client socket and no other pytest process takes a server's port;
- :mod:`devservers.redis_servers`: ``redis-server`` processes on such ports (single, cluster,
  sentinel);
- :mod:`devservers.celery_worker`: ``celery -A workers.app worker`` as a subprocess configured
  by ``MAILGUARD_*`` variables, and a client app with the same configuration.
- :mod:`devservers.rabbitmq`: a RabbitMQ node started, killed and restarted by the caller;
- :mod:`devservers.smtp_server`: a recording aiosmtpd server on 127.0.0.1 that can play back
  planned error replies (and a throwaway TLS certificate for it);
- :mod:`devservers.postfix`: a Postfix instance of its own (``postfix -c``) delivering into
  Maildirs, with STARTTLS, SMTP AUTH (cyrus sasldb), anvil limits and greylisting by
  :mod:`devservers.postgrey` as options (configuration: :mod:`devservers.postfix_config`).
"""
