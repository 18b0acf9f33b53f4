"""The ``mailguard`` command: run a worker, send and follow a mail, read and change what the workers
share (budgets, schedule, suppressions, holds, policy, reputation, warm-up), simulate a policy.

Configured by the same ``MAILGUARD_*`` variables as the worker (see :mod:`mailer.settings`).
Exit codes: 0 done, 1 refused or not found (a dropped mail, an unknown mail id, a server that
cannot be reached), 2 bad usage or input (a malformed address, an unknown kind, a bad policy, a
broken CSV line). Every error is one line on stderr; ``--debug`` shows the traceback instead.
Addresses are never printed: a recipient is shown as its keyed hash, as in the outcomes.

Celery is imported only by the commands that need it (``worker``, ``send``, ``outcome``,
``cancel``, ``demo``). One module a command (or a pair of commands on one record):

- :mod:`workers.cli.group`: the ``mailguard`` group, every command added to it;
- :mod:`workers.cli.errors`: exit codes and the one-line errors; :mod:`workers.cli.shared`:
  settings and shared stores the commands read;
- :mod:`workers.cli.worker`, :mod:`workers.cli.demo`: run a worker, play the demo;
- :mod:`workers.cli.send`, :mod:`workers.cli.outcome`: enqueue a mail, read its outcome;
- :mod:`workers.cli.status`, :mod:`workers.cli.reset`: a recipient's budget, forget it;
- :mod:`workers.cli.cancel`, :mod:`workers.cli.schedule`: cancel a waiting mail, the schedule;
- :mod:`workers.cli.suppression`: the suppression list by hand;
- :mod:`workers.cli.simulate`: replay traffic through a policy;
- :mod:`workers.cli.policy`: the live policy (``policy show | set | history``);
- :mod:`workers.cli.reputation`, :mod:`workers.cli.warmup`: senders' reputation and warm-up;
- :mod:`workers.cli.transport`: the transport's hold; :mod:`workers.cli.retry`: a failed mail
  sent again; :mod:`workers.cli.health`: the workers' liveness; :mod:`workers.cli.settings`:
  every variable and its value;
- :mod:`workers.cli.views`, :mod:`workers.cli.budget`: tables, and the budget reports.
"""

from __future__ import annotations

from workers.cli.group import main

__all__ = ["main"]
