"""Warm-up plans: a new sender (an address or a sending domain) sends no more in a day than its
plan allows, day 1 starting at its first mail, on the limiter's clock.

With ``MAILGUARD_WARMUP="orders@example.org: sendgrid; example.org: 50, 100, 200"`` every mail
of a sender on a plan is counted for it (an address's own plan first, else its domain's); over
the day's allowance a mail waits for the next day (deferred / ``warmup``, parked in the
schedule, in the order it came), never dropped for the plan itself (a wait past its kind's
deadline ends it ``expired``, as any wait would). A transactional kind
(``MAILGUARD_KIND_<NAME>_TRANSACTIONAL=1``; the built-in ``code``) is counted but never waits:
login codes keep flowing, and the bulk mail that comes after them has that much less room. A
sender idle ``MAILGUARD_WARMUP_IDLE`` (30 days) starts over on day 1. Past the plan's last day
the sender is warm: no allowance applies.

- :mod:`mailer.records.warmup.plans`: :class:`Plan`, the built-in plans with their sources,
  :func:`parse_plans`
- :mod:`mailer.records.warmup.base`: :class:`Taken`, :class:`Standing`, the store protocol
- :mod:`mailer.records.warmup.memory`, :mod:`mailer.records.warmup.redis` (its script
  ``lua/take.lua``): the stores
- :mod:`mailer.records.warmup.keyed`: :class:`Warmup` and :func:`warmup_from_url`

>>> from mailer.clock import ManualClock
>>> warmup = warmup_from_url("memory://", parse_plans("example.org: 2, 4"), clock=ManualClock())
>>> [warmup.take("news@example.org", f"m{n}").admitted for n in range(3)]
[True, True, False]
"""

from mailer.records.warmup.base import Standing, Taken
from mailer.records.warmup.gauges import WarmupCollector
from mailer.records.warmup.keyed import DAY, Warmup, warmup_from_url
from mailer.records.warmup.plans import BUILT_IN, Plan, parse_plan, parse_plans

__all__ = [
    "BUILT_IN",
    "DAY",
    "Plan",
    "Standing",
    "Taken",
    "Warmup",
    "WarmupCollector",
    "parse_plan",
    "parse_plans",
    "warmup_from_url",
]
