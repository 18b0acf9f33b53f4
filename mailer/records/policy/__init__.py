"""The live policy: the rate-limit policy (and kinds' tolerances and shares) stored in the
ledger's Redis with a version number, so every worker changes policy without a restart.

``mailguard policy set POLICY`` stores a new version (refused before storing when it does not
parse); each worker process reads the version with one ``GET`` at most once a second
(:class:`PolicyWatch`) and builds its guard anew for a new version, with a limiter for the new
policy on the same storage: the recipient scope's keys stay the same, so bookings already made
stay valid, and a mail running when the version changes finishes under the guard it started
with. A version a worker cannot parse is refused and logged loudly; the last good one stays.
With none stored, the environment's ``MAILGUARD_POLICY`` holds.

Keys: ``<ns>:{policy}:version`` and ``<ns>:{policy}:versions`` (no address in them).

- :mod:`mailer.records.policy.base`: :class:`LivePolicy`, the :class:`PolicyStore` protocol
- :mod:`mailer.records.policy.memory`, :mod:`mailer.records.policy.redis`: the stores
- :mod:`mailer.records.policy.policies`: :class:`LivePolicies`, :func:`policies_from_url`
- :mod:`mailer.records.policy.watch`: :class:`PolicyWatch`, a worker's watch (injected clock)

>>> from mailer.clock import ManualClock
>>> live = policies_from_url("memory://", clock=ManualClock(1000.0))
>>> live.set(LivePolicy("1/60s, 3/1h", {"code": {"max_wait": "2m"}})).version
1
>>> live.current().describe()
'1/60s, 3/1h; code max_wait=2m'
"""

from mailer.records.policy.base import KIND_FIELDS, LivePolicy, PolicyStore
from mailer.records.policy.memory import MemoryPolicyStore
from mailer.records.policy.policies import LivePolicies, policies_from_url
from mailer.records.policy.redis import RedisPolicyStore
from mailer.records.policy.watch import CHECK_EVERY, PolicyWatch

__all__ = [
    "CHECK_EVERY",
    "KIND_FIELDS",
    "LivePolicies",
    "LivePolicy",
    "MemoryPolicyStore",
    "PolicyStore",
    "PolicyWatch",
    "RedisPolicyStore",
    "policies_from_url",
]
