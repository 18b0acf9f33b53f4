"""Replay a trace of send attempts through the real limiter on a virtual clock: tune a policy.

Every attempt asks the same limiter a worker asks (:class:`~mailer.limits.limiter.Limiter` in
memory, on a :class:`~mailer.clock.ManualClock`: every scope, tier kind and kind share of the
policy), with its kind's ``max_wait`` as the worker would:

- allowed: sent at its attempt time (on time);
- booked: *deferred*, sent at its booking, ``lateness`` = booking - attempt (seconds);
- refused (the earliest slot is further away than the kind's ``max_wait``): *dropped*.

A trace is a CSV of ``time,recipient[,kind[,tenant]]`` (time in seconds from the start of the
trace; see :func:`read_csv`) or a generated pattern (:func:`generate`). :func:`compare` replays
one trace through two policies. Pure: no Celery, no I/O besides what the caller hands in, no
real clock. Modules: :mod:`~mailer.simulate.report` (attempts, results, summaries),
:mod:`~mailer.simulate.replay` (the replay), :mod:`~mailer.simulate.traces` (CSV and generated
traces), :mod:`~mailer.simulate.plot` (a figure).

>>> report = simulate(generate("abuse", recipients=10), Policy.parse("1/60s, 5/1h, 10/24h"))
>>> report.total.delivered + report.total.dropped == report.total.attempts
True

Not a model of SMTP: every mail the limiter lets through counts as delivered at its slot.
"""

# Policy: the doctest above builds one.
from mailer.limits.policy import Policy
from mailer.simulate.plot import LATENESS_TICKS, plot
from mailer.simulate.replay import compare, simulate
from mailer.simulate.report import (
    DAY,
    EPOCH,
    ORDER,
    Attempt,
    Report,
    Result,
    Status,
    Summary,
    percentile,
    tier_label,
)
from mailer.simulate.traces import ABUSED, PATTERNS, generate, read_csv, read_csv_file

__all__ = [
    "ABUSED",
    "DAY",
    "EPOCH",
    "LATENESS_TICKS",
    "ORDER",
    "PATTERNS",
    "Attempt",
    "Policy",
    "Report",
    "Result",
    "Status",
    "Summary",
    "compare",
    "generate",
    "percentile",
    "plot",
    "read_csv",
    "read_csv_file",
    "simulate",
    "tier_label",
]
