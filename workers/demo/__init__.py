"""``mailguard demo``: the main job on embedded defaults, time-compressed to play in under a minute.

Everything runs in this process: a threads-pool Celery worker (:mod:`workers.brokers.inprocess`) on
the memory broker, the memory limiter and ledger, and an aiosmtpd SMTP server on 127.0.0.1 (a free
port) that captures what the worker sends. A short script of mails to five fictitious
recipients (ada, bob, cy, mallory and dee, all ``@example.com``) goes through the real ``send_mail``
task with a compressed policy, ``1/1s, 5/10s, 10/30s``, and compressed tolerances (``code``
waits at most 3.75 s, ``default`` and ``notice`` 60 s):

- ada gets a code, a welcome and a notice in a second (the last two are deferred to booked
  slots by ``1/1s``), and a second code later (sent at once);
- bob gets a burst of 11 notices: five go a second apart, five more wait for ``5/10s``, the
  last one for ``10/30s``, about 30 s later; none is dropped (a notice may wait a minute);
- cy gets two mails far apart, both sent at once;
- mallory is abused: a bot asks for a login code every half second. The first few are deferred
  a second or two; once ``5/10s`` is full the next slot is further away than a code tolerates,
  so those codes are dropped (a stale code is worse than none);
- from t+9 s to t+12 s the worker is paused (one long task per pool thread): bob's mail booked
  for t+11 s runs late, gives its slot back and is re-booked behind his other bookings; the
  codes queued meanwhile have less of their tolerance left (it counts from the request);
- at t+14 s a newsletter to 200 readers is queued at once (kind ``notice``, priority 5), and
  right behind it a code for dee (``code``, priority 9): the worker takes the code next, so dee
  receives it well before most readers receive the newsletter (the burst is not compressed
  by ``--speed``; the memory broker orders each queue by priority, :mod:`workers.brokers.memory`).

A live table shows each mail queued, deferred (with the binding tier and booked time), sent
(and how late against its booking) or dropped; the summary gives per recipient the mails sent,
deferred and dropped, the largest lateness (``sent_at - due``), and what the SMTP server
captured, and checks from the booked slots that no recipient went over any tier. ``--speed``
divides every duration (policy windows, tolerances, the script) to compress further; ``--json``
prints the summary as JSON instead of tables.

``--redis URL`` runs the same story with the broker, the result backend, the limiter and the
ledger on that Redis; the worker still runs in this process (threads pool). The run uses a queue
of its own (``mailguard-demo-<random>``, deleted at the end) and a random limiter secret, so it
never takes a real worker's mail and never shares a budget with an earlier run.

The package, in the order a run uses it:

- :mod:`workers.demo.story`: the recipients, the script, the policy, kinds and settings, and
  :func:`configure`, which points the app and the guard at them;
- :mod:`workers.demo.capture`: the SMTP server that captures the worker's mail;
- :mod:`workers.demo.run`: :func:`run_demo`, the loop that enqueues and polls, and the record
  of the run (:class:`Run`, :class:`Row`) with its JSON summary;
- :mod:`workers.demo.views`: the headline, the tables and the conclusions (rich), live or at
  the end.
"""

from __future__ import annotations

from workers.demo.capture import SmtpCapture
from workers.demo.rows import Row
from workers.demo.run import Run, quiet_logs, run_demo
from workers.demo.story import (
    MAX_WAIT,
    POLICY,
    RECIPIENTS,
    DemoError,
    DemoInterrupted,
    Planned,
    Recipient,
    configure,
    demo_kinds,
    demo_policy,
    demo_settings,
    script,
)
from workers.demo.views import (
    conclusions,
    headline,
    mails_table,
    play_live,
    show_final,
    summary_table,
)

__all__ = [
    "MAX_WAIT",
    "POLICY",
    "RECIPIENTS",
    "DemoError",
    "DemoInterrupted",
    "Planned",
    "Recipient",
    "Row",
    "Run",
    "SmtpCapture",
    "conclusions",
    "configure",
    "demo_kinds",
    "demo_policy",
    "demo_settings",
    "headline",
    "mails_table",
    "play_live",
    "quiet_logs",
    "run_demo",
    "script",
    "show_final",
    "summary_table",
]
